"""Run history."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query

from ade_api.deps import SessionDep
from ade_api.schemas import Problem, RunDetail, RunOut, RunPage
from ade_tasks.db import runs as runs_db
from ade_tasks.db.schema import RunStatus
from ade_tasks.errors import InvalidInputError, NotFoundError

router = APIRouter(prefix="/api/v1/runs", tags=["runs"])


@router.get("", responses={422: {"model": Problem}})
def list_runs(
    session: SessionDep,
    rule: str | None = None,
    status: RunStatus | None = None,
    trigger_type: str | None = None,
    since: Annotated[datetime | None, Query(description="ISO 8601 with a time zone")] = None,
    limit: Annotated[int, Query(ge=1, le=runs_db.MAX_PAGE)] = runs_db.DEFAULT_PAGE,
    cursor: str | None = None,
) -> RunPage:
    """Runs, newest first, filtered; follow `next_cursor` for older ones."""
    if since is not None and since.tzinfo is None:
        raise InvalidInputError(
            f"since={since.isoformat()} has no time zone; add one, e.g. Z or +00:00"
        )
    filters = runs_db.RunFilter(rule, status, trigger_type, since)
    rows, next_cursor = runs_db.list_runs(session, filters, limit=limit, cursor=cursor)
    return RunPage(items=[RunOut.of(row) for row in rows], next_cursor=next_cursor)


@router.get("/{run_id}", responses={404: {"model": Problem}, 422: {"model": Problem}})
def get_run(run_id: str, session: SessionDep) -> RunDetail:
    """One run with its steps."""
    try:
        uuid.UUID(run_id)
    except ValueError:
        raise NotFoundError(f"run id {run_id!r} is not a run id (run ids are UUIDs)") from None
    row = runs_db.get_run(session, run_id)
    return RunDetail.with_steps(row, list(runs_db.list_steps(session, run_id)))
