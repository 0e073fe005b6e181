"""Pausing and resuming a rule, or one trigger of it, with a note (`ade_tasks.db.pauses`)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field

from ade_api.http.auth import actor
from ade_api.http.deps import ServicesDep, SessionDep
from ade_api.http.health_state import pause_out
from ade_api.http.routes.rules import NOT_FOUND
from ade_api.http.schemas.problem import problem_responses
from ade_api.http.schemas.rules import PauseOut
from ade_tasks.db import pauses as pauses_db
from ade_tasks.db import rules as rules_db

router = APIRouter(prefix="/api/v1/rules", tags=["rules"])
INVALID = problem_responses({422: "no note, or no such (automatic) trigger"})


class PauseRequest(BaseModel):
    """What to pause and why."""

    model_config = ConfigDict(extra="forbid")

    note: str = Field(max_length=pauses_db.NOTE_MAX, description="why; recorded on every skip")
    trigger_index: int | None = Field(
        default=None, ge=0, description="one trigger (numbered from 0); none: the whole rule"
    )
    by: str = Field(default="", max_length=200, description="who, for a shared token")


class ResumeRequest(BaseModel):
    """What to resume."""

    model_config = ConfigDict(extra="forbid")

    trigger_index: int | None = Field(default=None, ge=0)
    by: str = Field(default="", max_length=200)


@router.post("/{rule_id}/pause", responses={**NOT_FOUND, **INVALID})
def pause_rule(
    rule_id: str, body: PauseRequest, request: Request, services: ServicesDep
) -> PauseOut:
    """Pause the rule's automatic triggers (or one of them): their slots and events are
    recorded `skipped` with the note until it is resumed. A running run finishes; manual runs
    still start. Pausing again replaces the note (operator)."""
    with services.session_factory.begin() as session:
        found = pauses_db.pause(
            session, rule_id, body.trigger_index, body.note, actor(request, body.by)
        )
    return pause_out(found)


@router.post("/{rule_id}/resume", responses=NOT_FOUND)
def resume_rule(
    rule_id: str, request: Request, services: ServicesDep, body: ResumeRequest | None = None
) -> PauseOut:
    """Lift the rule's pause (or one trigger's); the answer is the pause that was lifted.
    404 when it was not paused (operator)."""
    body = body or ResumeRequest()
    with services.session_factory.begin() as session:
        found = pauses_db.resume(session, rule_id, body.trigger_index)
    what = f"rule {rule_id!r}"
    if found.trigger_index is not None:
        what = f"trigger #{found.trigger_index} of {what}"
    by = actor(request, body.by)
    return pause_out(found, f"{what} resumed by {by}; its next slot fires again")


@router.get("/{rule_id}/pauses", responses=NOT_FOUND)
def list_pauses(rule_id: str, session: SessionDep) -> list[PauseOut]:
    """The rule's pauses (the whole rule's first); empty when nothing is paused."""
    rules_db.get_rule(session, rule_id)
    found = pauses_db.pauses_of(session, [rule_id]).get(rule_id, [])
    return [pause_out(p) for p in found]
