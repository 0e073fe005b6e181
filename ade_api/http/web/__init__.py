"""The run-history web page: server-rendered HTML under `/ui` (see `ade_api.http.web.routes`).

Reads and forms call the same `ade_tasks` functions the JSON routes call; may import `ade_tasks`
and the rest of `ade_api.http` (auth, deps, problems, schemas).
"""
