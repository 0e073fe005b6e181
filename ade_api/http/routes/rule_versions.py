"""A rule's version history: every document it had, who changed it and when."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from ade_api.http.deps import SessionDep
from ade_api.http.routes.rules import NOT_FOUND
from ade_api.http.schemas.params import VersionCursor
from ade_api.http.schemas.rules import RuleVersionOut, RuleVersionPage
from ade_tasks.db import rule_versions as rule_versions_db

router = APIRouter(prefix="/api/v1/rules", tags=["rules"])


@router.get("/{rule_id}/versions", responses=NOT_FOUND)
def rule_versions(
    rule_id: str,
    session: SessionDep,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    cursor: VersionCursor = None,
) -> RuleVersionPage:
    """A rule's version history, newest first: every document it had, who changed it (token name,
    or `rules sync` for a file) and when; also of a deleted rule."""
    rows, next_cursor = rule_versions_db.list_versions(session, rule_id, limit=limit, cursor=cursor)
    return RuleVersionPage(
        items=[RuleVersionOut.model_validate(row) for row in rows], next_cursor=next_cursor
    )
