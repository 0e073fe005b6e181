"""A toy guardrail: quiet hours, a daily window (UTC) in which a rule's runs do not start, which a
rule sets under `guardrails: {quiet_hours: {start: "22:00", end: "06:00"}}`."""

from __future__ import annotations

from datetime import datetime, time

from pydantic import model_validator

from ade_tasks.guardrails.guardrail import Admission, Guardrail, HealthState
from ade_tasks.rules.document import Document
from ade_tasks.rules.rule import Rule


class QuietHoursConfig(Document):
    """From `start` to `end` (UTC; across midnight when `end` is the earlier) no run starts."""

    start: time
    end: time

    @model_validator(mode="after")
    def _a_window(self) -> QuietHoursConfig:
        if self.start == self.end:
            raise ValueError(f"start and end are both {self.start:%H:%M}; give two times")
        return self

    def covers(self, moment: datetime) -> bool:
        """Is `moment` within the quiet hours?"""
        now = moment.time().replace(tzinfo=None)
        if self.start < self.end:
            return self.start <= now < self.end
        return now >= self.start or now < self.end

    def window(self) -> str:
        """The quiet hours in words."""
        return f"{self.start:%H:%M}-{self.end:%H:%M} UTC"


class QuietHours(Guardrail):
    """Refuses a rule's runs during its quiet hours, and says so in its health."""

    name = "quiet-hours"
    rule_fields = ("quiet_hours",)
    config_model = QuietHoursConfig
    config_key = "quiet_hours"

    def admit(self, admission: Admission) -> str | None:
        quiet = self.config(admission.rule)
        if isinstance(quiet, QuietHoursConfig) and quiet.covers(admission.now):
            return f"skipped by quiet hours: rule {admission.rule.id!r} is quiet {quiet.window()}"
        return None

    def health(self, rule: Rule, state: HealthState) -> str | None:
        quiet = self.config(rule)
        if isinstance(quiet, QuietHoursConfig) and quiet.covers(state.now):
            return f"its quiet hours ({quiet.window()}) hold its runs until {quiet.end:%H:%M} UTC"
        return None


QUIET_HOURS = QuietHours()
