"""A rule's schedule: its next fire times, per trigger, and its past occurrences."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from ade_api.http.schemas.rules import PauseOut


class FireTime(BaseModel):
    """One upcoming fire of a schedule trigger."""

    utc: datetime
    local: datetime = Field(description="the same moment in the trigger's time zone")
    dst: str | None = Field(
        default=None,
        description="how a daylight-saving change moved this fire (a local time that does not "
        "exist that day) or doubled it (one that happens twice), per the trigger's dst_gap "
        "and dst_repeat; null when it did not",
    )


class ScheduleTriggerPreview(BaseModel):
    """The next fire times of one schedule trigger."""

    trigger_index: int
    cron: str
    timezone: str
    next: list[FireTime]


class SchedulePreview(BaseModel):
    """The next fire times of every schedule trigger of a rule."""

    rule_id: str
    enabled: bool
    triggers: list[ScheduleTriggerPreview]


class TriggerSchedule(ScheduleTriggerPreview):
    """The next fire times of one schedule trigger, or why it has none."""

    problem: str | None = Field(
        default=None,
        description="why this trigger cannot fire (then `next` is empty), e.g. a cron that "
        "never fires, stored before validation refused it",
    )
    paused: str | None = Field(
        default=None,
        description="the pause that holds it (the rule's or its own: who, since when, the "
        "note): its `next` times are skipped until it is resumed; null when not paused",
    )


class RuleSchedule(SchedulePreview):
    """The next fire times of every schedule trigger of a rule, and its problems."""

    triggers: list[TriggerSchedule]  # type: ignore[assignment]
    problems: list[str] = Field(
        default_factory=list,
        description="why some or all of its schedules cannot fire (each also named on its "
        "trigger); the beats leave those out and keep firing everything else",
    )
    pauses: list[PauseOut] = Field(
        default_factory=list, description="the rule's pauses, as `GET /api/v1/rules/{id}`"
    )


class OccurrenceOut(BaseModel):
    """A claimed schedule occurrence and what came of it."""

    model_config = ConfigDict(from_attributes=True)

    trigger_index: int
    cron: str
    slot: datetime
    outcome: str = Field(description="claimed | fired | skipped | missed")
    run_id: str | None
    reason: str | None
    claimed_by: str
    claimed_at: datetime
    duplicate_claims: int
