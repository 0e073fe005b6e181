"""The module paths operators give `celery -A` name the one app: the current one and the one of
earlier releases that deployed units still carry."""

from __future__ import annotations

from celery import Celery
from celery.app.utils import find_app


def test_both_app_paths_find_the_same_celery_app() -> None:
    current = find_app("ade_workers.celery.app")
    earlier = find_app("ade_workers.celery_app")
    assert isinstance(current, Celery)
    assert earlier is current
    assert current.conf.beat_scheduler == "ade_workers.celery.beat:DatabaseScheduler"
