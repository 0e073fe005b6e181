"""Backfilling a rule's schedules over a past range (`ade_tasks.schedule.backfill`), for
operators."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, ConfigDict, Field, field_validator

from ade_api.http.auth import actor, forcing_admin
from ade_api.http.deps import ServicesDep
from ade_api.http.routes.rules import NOT_FOUND
from ade_api.http.schemas.actor import By
from ade_api.http.schemas.params import Instant
from ade_api.http.schemas.problem import Problem, Responses
from ade_tasks.cron.slots import check_zoned
from ade_tasks.schedule.backfill import (
    MAX_SLOTS,
    BackfillReport,
    BackfillRequest,
    SlotReport,
    backfill,
)

router = APIRouter(prefix="/api/v1/rules", tags=["rules"])
REFUSED: Responses = {
    **NOT_FOUND,
    403: {"model": Problem, "description": "force without an admin token"},
    409: {
        "model": Problem,
        "description": "the rule is disabled, paused or untrusted, or ADE_DISABLE_AUTOMATIONS "
        "is on and the backfill is not forced",
    },
    422: {
        "model": Problem,
        "description": "a bad range (no zone, from >= to, to in the future, from beyond 35 "
        f"days, more than {MAX_SLOTS} slots) or a rule without cron triggers",
    },
}


class BackfillBody(BaseModel):
    """The range to backfill, `[from, to)`, and how."""

    model_config = ConfigDict(
        extra="forbid",
        populate_by_name=True,
        json_schema_extra={
            "examples": [{"from": "2026-11-28T00:00:00+01:00", "to": "2026-11-30T00:00:00Z"}]
        },
    )

    start: Instant = Field(
        alias="from", description="first instant, inclusive, with Z or an offset"
    )
    end: Instant = Field(
        alias="to", description="last instant, exclusive, with Z or an offset; not in the future"
    )
    dry_run: bool = Field(default=False, description="only explain: claim and fire nothing")
    include_skipped: bool = Field(
        default=False,
        description="also fire slots recorded skipped before any run was created (a pause, "
        "the kill switch, a disabled rule); slots skipped with a run never fire again",
    )
    force: bool = Field(
        default=False, description="backfill while ADE_DISABLE_AUTOMATIONS is on (admin only)"
    )
    by: By = None

    @field_validator("start", mode="before")
    @classmethod
    def _zoned_start(cls, value: object) -> object:
        return check_zoned(value, "from")

    @field_validator("end", mode="before")
    @classmethod
    def _zoned_end(cls, value: object) -> object:
        return check_zoned(value, "to")


class BackfillSlotOut(BaseModel):
    """One slot of the range and what the backfill did with it."""

    trigger_index: int
    cron: str
    timezone: str
    slot: datetime = Field(description="the slot in UTC")
    local: datetime = Field(description="the same slot in the trigger's time zone")
    result: str = Field(
        description="fired | skipped | would-fire | already-fired | already-skipped | "
        "in-progress | paused"
    )
    run_id: str | None = Field(description="the run it fired, or the run that had it")
    was: str | None = Field(description="its occurrence record before (null: never claimed)")
    detail: str = Field(description="why, in words")


class BackfillOut(BaseModel):
    """Every slot of the range, oldest first, the count of each result and a summary line."""

    rule_id: str
    start: datetime = Field(serialization_alias="from")
    end: datetime = Field(serialization_alias="to")
    dry_run: bool
    slots: list[BackfillSlotOut]
    counts: dict[str, int]
    summary: str


def _slot_out(slot: SlotReport) -> BackfillSlotOut:
    key = slot.key
    return BackfillSlotOut(
        trigger_index=key.trigger_index,
        cron=key.cron,
        timezone=slot.timezone,
        slot=key.slot,
        local=key.slot.astimezone(ZoneInfo(slot.timezone)),
        result=slot.result.value,
        run_id=slot.run_id,
        was=slot.was,
        detail=slot.detail,
    )


def _out(report: BackfillReport) -> BackfillOut:
    request = report.request
    return BackfillOut(
        rule_id=request.rule_id,
        start=request.start,
        end=request.end,
        dry_run=request.dry_run,
        slots=[_slot_out(slot) for slot in report.slots],
        counts=report.counts(),
        summary=report.summary,
    )


@router.post("/{rule_id}/backfill", responses=REFUSED, response_model_by_alias=True)
async def backfill_rule(
    rule_id: str, body: BackfillBody, request: Request, services: ServicesDep
) -> BackfillOut:
    """Fire the slots of the rule's cron triggers in `[from, to)` that were missed or never
    claimed, once each, oldest first, under the rule's overlap policy; report every other slot
    (already fired, skipped before, being fired by a beat, paused) with its run or reason.

    At most 1,000 slots per call (split longer ranges); `to` may not be in the future (slots
    not yet due belong to the beats). Operators may backfill; forcing past
    ADE_DISABLE_AUTOMATIONS needs an admin. `dry_run: true` only explains. The call is in the
    audit log, and each claimed occurrence records `backfill by <who>`.
    """
    forced_by = forcing_admin(request, body.force, body.by)
    wanted = BackfillRequest(
        rule_id,
        body.start,
        body.end,
        actor(request, body.by),
        dry_run=body.dry_run,
        include_skipped=body.include_skipped,
        forced_by=forced_by,
    )
    report = await run_in_threadpool(
        backfill,
        services.session_factory,
        services.sender,
        wanted,
        automations_disabled=services.settings.disable_automations,
    )
    return _out(report)
