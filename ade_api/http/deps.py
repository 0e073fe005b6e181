"""Request dependencies: the unit of work and the shared services, as `Annotated` types."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Annotated

from celery import Celery
from fastapi import Depends, Request
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from ade_api.http.delivery_intake import EventIntake
from ade_tasks.db.engine import SessionFactory
from ade_tasks.db.retry import is_connection_lost
from ade_tasks.runs.dispatch import dispatch_retrying
from ade_tasks.runs.dispatch_results import DispatchResult
from ade_tasks.runs.senders import RunSender
from ade_tasks.runs.trigger_events import TriggerEvent
from ade_tasks.settings import Settings

log = logging.getLogger(__name__)


@dataclass
class Services:
    """What the API's routes share, built once by `create_app`."""

    settings: Settings
    session_factory: SessionFactory
    sender: RunSender
    celery: Celery
    intake: EventIntake

    def dispatch(self, rule_id: str, trigger: TriggerEvent, *, own_key: bool) -> DispatchResult:
        """Dispatch a run an operator asked for (the API, the web page), under the kill switch
        of these settings. `own_key`: the trigger's key is the request's own, not the caller's
        Idempotency-Key, so a dispatch that met a dead connection is repeated safely."""
        return dispatch_retrying(
            self.session_factory,
            self.sender,
            rule_id,
            trigger,
            own_key=own_key,
            automations_disabled=self.settings.disable_automations,
        )


async def get_services(request: Request) -> Services:
    # async: FastAPI runs a plain `def` dependency in its thread pool, a hop per request.
    services: Services = request.app.state.services
    return services


ServicesDep = Annotated[Services, Depends(get_services)]


def get_session(services: ServicesDep) -> Iterator[Session]:
    """A read-only session per request (writes go through dispatch, which owns its transaction).

    It is closed after the answer was sent; a connection that died by then (its ROLLBACK
    fails) changes nothing the answer said, so that is not an error of the request (a read
    that meets a dead connection before it answers is run again: `ade_api.http.db_faults`).
    """
    session = services.session_factory()
    try:
        yield session
    finally:
        try:
            session.close()
        except DBAPIError as exc:
            if not is_connection_lost(exc):
                raise
            log.info("a read's connection died after it answered: %s", type(exc.orig).__name__)


SessionDep = Annotated[Session, Depends(get_session)]
