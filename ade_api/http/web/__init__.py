"""The run-history web page: server-rendered HTML under `/ui` (see `ade_api.http.web.routes`)."""
