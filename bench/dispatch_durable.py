"""The third side of `make bench` (bench/dispatch.py): what a team would run instead of ADE for
a durable history of its tasks, raw Celery with a PostgreSQL result backend.

`celery -A bench.dispatch_durable worker` consumes the queue `bench.durable`. Its app is built
as the raw side's (`create_celery_app`: the same broker, reliable delivery settings, prefork pool
and transport choice) plus Celery's SQLAlchemy result backend on the bench's scratch database
(`db+postgresql+psycopg://…`, Celery's own engine options) and `task_track_started=True`, so
that each task commits its STARTED state before its body and its SUCCESS after it, as such a
deployment's history needs. Its task runs the `true` subprocess, as raw Celery's and ADE's do.

A task's finish is recorded at `task_postrun`, which Celery sends after the result backend
stored the outcome, so the side's latency and throughput include that commit, as ADE's include
its outcome's. At the end the side checks that every task it sent has a SUCCESS row.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from typing import Any

import redis
from celery import Celery, signals
from sqlalchemy import Engine, make_url, text

from ade_tasks.settings import Settings, get_settings
from ade_workers.celery.app import create_celery_app
from bench.common import BenchError
from bench.dispatch_sides import RAW_TRANSPORT_ENV, RawSide, Result, record_finish

DURABLE_QUEUE = "bench.durable"
DURABLE_TASK = "bench.true_durable"
LABEL = "celery+pg results `true`"


def result_backend_url(database_url: str) -> str:
    """Celery's SQLAlchemy result backend URL for `database_url`, on psycopg 3 (the driver the
    project installs; SQLAlchemy's plain `postgresql://` would pick psycopg2)."""
    url = make_url(database_url)
    if url.drivername in ("postgresql", "postgres"):
        url = url.set(drivername="postgresql+psycopg")
    return "db+" + url.render_as_string(hide_password=False)


def durable_app(settings: Settings | None = None, *, ade_transport: bool | None = None) -> Celery:
    """The durable baseline's app: the raw side's, plus a PostgreSQL result backend on the
    settings' database, `task_track_started` and results kept for its `true` task."""
    settings = settings or get_settings()
    app = create_celery_app(settings, extra_queues=(DURABLE_QUEUE,))
    if ade_transport is None:
        ade_transport = os.environ.get(RAW_TRANSPORT_ENV) == "ade"
    if not ade_transport:
        app.conf.broker_transport = None
    app.conf.update(
        result_backend=result_backend_url(settings.database_url),
        task_ignore_result=False,
        task_track_started=True,
    )
    url = settings.broker_url

    @app.task(name=DURABLE_TASK)  # type: ignore[untyped-decorator]
    def true_durable(key: str, seq: int) -> None:
        del key, seq  # recorded at task_postrun, once the result is stored
        subprocess.run(["true"], check=True)

    def record(task: Any = None, args: Sequence[Any] | None = None, **_: Any) -> None:
        if task is not None and task.name == DURABLE_TASK and args:
            record_finish(url, str(args[0]), int(args[1]))

    signals.task_postrun.connect(record, weak=False, dispatch_uid="bench.dispatch_durable")
    return app


class DurableSide(RawSide):
    """The durable baseline's `true` task; at the end, every task sent has its SUCCESS row."""

    def __init__(
        self, app: Celery, store: redis.Redis, engine: Engine, worker_pgid: int, sent_before: int
    ) -> None:
        super().__init__(app, store, DURABLE_TASK, LABEL, worker_pgid, queue=DURABLE_QUEUE)
        self.engine = engine
        self.sent_before = sent_before  # the warm-up's, which `finish` counts too

    def finish(self, deadline: float) -> Result:
        result = super().finish(deadline)
        sent = self.sent_before + sum(c for c, _ in result.bursts) + len(result.latencies)
        with self.engine.connect() as connection:
            stored = connection.execute(
                text("SELECT count(*) FROM celery_taskmeta WHERE status = 'SUCCESS'")
            ).scalar_one()
        if stored != sent:
            raise BenchError(f"the result backend holds {stored} successes of {sent} tasks sent")
        return result


app: Celery  # declared only: `__getattr__` builds it on first access


def __getattr__(name: str) -> Celery:
    # `celery -A bench.dispatch_durable` looks up `app`; the worker's settings: its environment.
    global app
    if name == "app":
        app = durable_app()
        return app
    raise AttributeError(name)
