"""Liveness and readiness."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from sqlalchemy import text
from sqlalchemy.orm import Session

from ade_api.http.deps import ServicesDep
from ade_tasks.db.retry import retrying
from ade_workers.celery.app import broker_reachable

router = APIRouter(tags=["health"])


def _select_one(session: Session) -> None:
    session.execute(text("SELECT 1"))


@router.get("/healthz")
def healthz() -> dict[str, str]:
    """The process is up."""
    return {"status": "ok"}


@router.get("/readyz")
async def readyz(services: ServicesDep) -> JSONResponse:
    """The database and the broker are reachable (503 with the reasons otherwise).

    `automations` says whether triggers create runs: `disabled` while the kill switch
    `ADE_DISABLE_AUTOMATIONS` is on. That does not make the replica unready (the API still
    serves history, approvals and stores webhook deliveries), so the status code ignores it."""

    def check_db() -> str | None:
        # Once more on a fresh connection if the pooled one died: a database that restarted and
        # is back must not take the replica out of service.
        try:
            retrying(services.session_factory, _select_one, what="readiness check", attempts=2)
        except Exception as exc:  # any failure means "not ready"
            return f"{type(exc).__name__}: {exc}"
        return None

    db_error, broker_error = await asyncio.gather(
        asyncio.to_thread(check_db), asyncio.to_thread(broker_reachable, services.celery)
    )
    checks = {"database": db_error or "ok", "broker": broker_error or "ok"}
    ready = db_error is None and broker_error is None
    automations = "disabled" if services.settings.disable_automations else "enabled"
    return JSONResponse(
        {"status": "ready" if ready else "not ready", "checks": checks, "automations": automations},
        status_code=200 if ready else 503,
    )
