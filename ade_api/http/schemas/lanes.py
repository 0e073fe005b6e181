"""Lanes (git worktrees on their own branch) and their deferred deletions."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from ade_tasks.json_document import JsonObject


class LaneOut(BaseModel):
    """A lane (git worktree on its own branch)."""

    model_config = ConfigDict(from_attributes=True)

    id: str
    project: str
    name: str
    branch: str
    path: str
    base_ref: str
    base_sha: str
    run_id: str | None
    status: str
    created_at: datetime
    deleted_at: datetime | None


class CleanupOut(BaseModel):
    """A deferred lane deletion."""

    model_config = ConfigDict(from_attributes=True)

    id: int
    run_id: str
    step_id: str
    lane_id: str
    due_at: datetime
    status: str = Field(description="scheduled | executing | done | failed | cancelled")
    attempts: int
    result: JsonObject | None
    error: str | None
    finished_at: datetime | None
