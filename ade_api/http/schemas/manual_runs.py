"""Manual runs of a rule: the request, the run it started, or the run it scheduled."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from ade_tasks.cron.slots import check_not_past, check_zoned
from ade_tasks.json_document import JsonObject
from ade_tasks.rules.document import Duration
from ade_tasks.rules.triggers import check_catchup_window, check_delay


class ManualRunRequest(BaseModel):
    """Inputs of a manual run; with `run_at` or `delay_seconds` (at most one), the run is
    scheduled to fire once at that time instead of now (see `ScheduledRunOut`)."""

    model_config = ConfigDict(extra="forbid")

    inputs: JsonObject = Field(default_factory=dict)
    requested_by: str = ""
    force: bool = Field(
        default=False,
        description="run even while ADE_DISABLE_AUTOMATIONS is on (admin tokens only)",
    )
    catchup_window: Duration | None = Field(
        default=None,
        description="how late a scheduled run may still fire when no beat could fire it on "
        "time (default 1 min; then it is recorded `missed`)",
    )
    run_at: datetime | None = Field(
        default=None, description="when to fire, with Z or an offset: 2026-12-24T18:00:00+01:00"
    )
    delay_seconds: int | None = Field(default=None, description="fire this many seconds from now")

    @field_validator("run_at", mode="before")
    @classmethod
    def _zoned(cls, value: object) -> object:
        return None if value is None else check_zoned(value, "run_at")

    @field_validator("run_at")
    @classmethod
    def _not_past(cls, value: datetime | None, info: ValidationInfo) -> datetime | None:
        if value is not None:
            value = value.astimezone(UTC)
            check_not_past(value, info.data.get("catchup_window"), "run_at")
        return value

    @field_validator("delay_seconds")
    @classmethod
    def _delay(cls, value: int | None, info: ValidationInfo) -> int | None:
        if value is None:
            return None
        if info.data.get("run_at") is not None:
            raise ValueError("give run_at or delay_seconds, not both")
        return check_delay(value, "from now")

    @field_validator("catchup_window")
    @classmethod
    def _window(cls, value: timedelta | None) -> timedelta | None:
        return check_catchup_window(value)

    def scheduled_for(self, now: datetime) -> datetime | None:
        """When the run is to fire, or None for a run now."""
        if self.run_at is not None:
            return self.run_at
        if self.delay_seconds is not None:
            return now + timedelta(seconds=self.delay_seconds)
        return None


class ScheduledRunOut(BaseModel):
    """A run scheduled to fire once (a rule's one-shot trigger, or a scheduled manual run)."""

    model_config = ConfigDict(from_attributes=True)

    id: str
    rule_id: str
    trigger_index: int | None = Field(description="the rule's trigger; null for a manual run")
    run_at: datetime
    status: str = Field(description="pending | claimed | fired | skipped | missed | cancelled")
    requested_by: str
    inputs: JsonObject
    created_at: datetime
    run_id: str | None
    reason: str | None


class ManualRunAccepted(BaseModel):
    """A manual run was recorded (and, unless `sent` is false, handed to the workers)."""

    run_id: str
    status: str
    created: bool = Field(description="false when the Idempotency-Key matched an earlier run")
    sent: bool
    message: str
    run_url: str
