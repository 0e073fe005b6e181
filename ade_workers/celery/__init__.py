"""The Celery glue: the app and its configuration, the thin tasks, the beat scheduler and the
threads a beat hosts (GitHub polling, the relay drain), the worker's housekeeping and metrics.

Everything that knows Celery lives here, so the run engine (`ade_workers.engine`) and the domain
(`ade_tasks`) stay testable without a broker. May import `ade_tasks`, `ade_workers.engine`,
`ade_workers.integrations` and `celery`/`kombu`; nothing in `ade_workers` imports this room except
the tasks' callers through `ade_workers.celery.app`.

The module path of the app is what operators type: `celery -A ade_workers.celery.app worker`
(`ade_workers.celery_app`, its path in earlier releases, still names the same app).
"""
