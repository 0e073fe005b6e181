"""Request dependencies: the unit of work and the shared services, as `Annotated` types."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Annotated

from celery import Celery
from fastapi import Depends, Request
from sqlalchemy.orm import Session

from ade_api.intake import EventIntake
from ade_tasks.db.engine import SessionFactory
from ade_tasks.dispatch import TaskSender
from ade_tasks.settings import Settings


@dataclass
class Services:
    """What the API's routes share, built once by `create_app`."""

    settings: Settings
    session_factory: SessionFactory
    sender: TaskSender
    celery: Celery
    intake: EventIntake


async def get_services(request: Request) -> Services:
    # async: FastAPI runs a plain `def` dependency in its thread pool, a hop per request.
    services: Services = request.app.state.services
    return services


ServicesDep = Annotated[Services, Depends(get_services)]


def get_session(services: ServicesDep) -> Iterator[Session]:
    """A read-only session per request (writes go through dispatch, which owns its transaction)."""
    with services.session_factory() as session:
        yield session


SessionDep = Annotated[Session, Depends(get_session)]
