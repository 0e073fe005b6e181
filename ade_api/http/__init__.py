"""The HTTP edge: the FastAPI app, its auth, schemas, routes and the web page.

Requests become calls into `ade_tasks` (rules, runs, ingress) through the unit of work in `deps`;
domain errors become problem documents in `problems`. May import `ade_tasks`, and
`ade_workers.celery` for the task sender and the broker's health; the CLI (`ade_api.cli`) imports
this room only to serve it (`ade-tasks api`, `ade-tasks dev`).
"""
