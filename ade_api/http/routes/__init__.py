"""One router per resource of the JSON API (`/api/v1/...`, `/metrics`, `/healthz`).

Routes are thin: they read the request, call `ade_tasks`, and answer a schema of
`ade_api.http.schemas`. May import `ade_tasks`, the rest of `ade_api.http`, and
`ade_workers.celery` for the broker's health and queue depths.
"""
