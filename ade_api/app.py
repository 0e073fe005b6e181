"""The FastAPI application factory."""

from __future__ import annotations

import logging

from celery import Celery
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from ade_api.deps import Services
from ade_api.routes import health, ingress, operations, rules, runs, webhooks
from ade_tasks.db.engine import SessionFactory, create_db_engine, create_session_factory
from ade_tasks.dispatch import TaskSender
from ade_tasks.errors import (
    AdeError,
    AdmissionError,
    BrokerUnavailableError,
    ConflictError,
    InvalidInputError,
    NotFoundError,
    PolicyViolationError,
)
from ade_tasks.settings import Settings
from ade_workers.celery_app import CelerySender, create_celery_app

log = logging.getLogger(__name__)

PROBLEM = "application/problem+json"
STATUS_OF: list[tuple[type[AdeError], int, str]] = [
    (NotFoundError, 404, "Not Found"),
    (InvalidInputError, 422, "Invalid Request"),
    (AdmissionError, 409, "Not Admitted"),
    (ConflictError, 409, "Conflict"),
    (PolicyViolationError, 403, "Policy Violation"),
    (BrokerUnavailableError, 503, "Broker Unavailable"),
]


def problem(status: int, title: str, detail: str) -> JSONResponse:
    """An error response as problem+json."""
    body = {"type": "about:blank", "title": title, "status": status, "detail": detail}
    return JSONResponse(body, status_code=status, media_type=PROBLEM)


async def _ade_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, AdeError)
    for kind, status, title in STATUS_OF:
        if isinstance(exc, kind):
            return problem(status, title, exc.message)
    log.error("unhandled ADE error: %s", exc)
    return problem(500, "Internal Error", exc.message)


async def _validation_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    parts = []
    for error in exc.errors():
        where = ".".join(str(p) for p in error["loc"])
        parts.append(f"{where}: {error['msg']}")
    return problem(422, "Invalid Request", "; ".join(parts))


def create_app(
    settings: Settings,
    *,
    session_factory: SessionFactory | None = None,
    celery: Celery | None = None,
    sender: TaskSender | None = None,
) -> FastAPI:
    """The HTTP API; pass the session factory and Celery app to share them (embedded mode)."""
    if session_factory is None:
        session_factory = create_session_factory(create_db_engine(settings.effective_database_url))
    celery = celery or create_celery_app(settings, session_factory=session_factory)
    app = FastAPI(
        title="ADE Tasks",
        version="0.1.0",
        description="Run history, rules and manual runs of an ADE Tasks cluster.",
    )
    app.state.services = Services(settings, session_factory, sender or CelerySender(celery), celery)
    app.add_exception_handler(AdeError, _ade_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.include_router(health.router)
    app.include_router(rules.router)
    app.include_router(runs.router)
    app.include_router(operations.router)
    app.include_router(webhooks.router)
    app.include_router(ingress.router)
    return app


def app_from_environment() -> FastAPI:
    """The API as `ade-tasks api --workers N` serves it: each uvicorn worker process builds its
    own app (and engine) from the `ADE_*` environment."""
    from ade_tasks.settings import get_settings

    settings = get_settings()
    engine = create_db_engine(
        settings.effective_database_url, pool_size=settings.db_pool_size, max_overflow=0
    )
    return create_app(settings, session_factory=create_session_factory(engine))
