"""A worker app (`celery -A tests.integration.slow_ingress_app worker`) whose matching of each
ingress event first waits `ADE_TEST_SLOW_MATCH_SECONDS`: a pool process held by slow matching,
as an event near its 10 s bound holds one, without spending the CPU the runs beside it need
(a ReDoS title, the other way to make matching slow, would measure CPU contention instead)."""

from __future__ import annotations

import os
import time
from typing import Any

from celery import Celery

from ade_workers.celery import tasks

_dispatch = tasks.match_ingress_event


def _slow_dispatch(*args: Any, **kwargs: Any) -> Any:
    time.sleep(float(os.environ["ADE_TEST_SLOW_MATCH_SECONDS"]))
    return _dispatch(*args, **kwargs)


# The ingress task calls the name it imported; the pool's processes fork with this one.
tasks.match_ingress_event = _slow_dispatch  # type: ignore[assignment]


def __getattr__(name: str) -> Celery:
    if name == "app":
        from ade_workers.celery import app

        return app.app
    raise AttributeError(name)
