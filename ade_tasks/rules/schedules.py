"""The next fire times of a rule's cron triggers, each trigger on its own (what `rules next`,
the rule answer of the API and rule health show)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from ade_tasks.cron.slots import ScheduleError, next_fire_times, series_of
from ade_tasks.rules.rule import Rule
from ade_tasks.rules.triggers import ScheduleTrigger


@dataclass(frozen=True)
class TriggerSchedule:
    """The next fire times of one schedule trigger, or why it has none."""

    index: int
    trigger: ScheduleTrigger
    times: list[datetime]
    problem: str | None = None
    #: Per time: how a daylight-saving change moved or doubled it (None: it did not).
    dst: list[str | None] = field(default_factory=list)


def rule_schedules(rule: Rule, now: datetime, count: int) -> list[TriggerSchedule]:
    """The next `count` UTC fire times of each schedule trigger of a rule, each trigger
    evaluated on its own: one that cannot fire carries its problem and no times."""
    found = []
    for index, trigger in enumerate(rule.triggers):
        if not isinstance(trigger, ScheduleTrigger) or trigger.cron is None:
            continue  # one-shot triggers are listed as scheduled runs, not previewed here
        spec = trigger.spec(rule.id, index)
        try:
            times = next_fire_times(spec, now, count)
            notes = [series_of(spec).evaluator.dst_note(t) for t in times]
            found.append(TriggerSchedule(index, trigger, times, None, notes))
        except ScheduleError as exc:
            found.append(TriggerSchedule(index, trigger, [], f"triggers.{index}: {exc.message}"))
    return found
