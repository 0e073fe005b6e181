"""The Celery app under its module path of earlier releases, so deployed command lines
(`celery -A ade_workers.celery_app worker`, Flower units) keep working after an upgrade.

The app lives in `ade_workers.celery.app`; new deployments name that one.
"""

from ade_workers.celery.app import app

__all__ = ["app"]
