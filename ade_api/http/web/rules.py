"""The rules pages: every rule with its state and health, and one rule's page (health per
trigger, pauses with who, when and why, scheduled runs still to fire, charts of the last 30
days, next fire times, recent occurrences and runs, the rule's source and its versions:
`ade_api.http.web.rule_source`).

Health is `ade_api.http.health_state`'s, computed from the API process's live state as
`GET /api/v1/rules` answers it: ready with the path that fires each trigger, or the setup
error in words. The forms on a rule's page post to `ade_api.http.web.controls`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse
from sqlalchemy.orm import Session

from ade_api.http.health_state import health_of, live_state
from ade_api.http.web import charts
from ade_api.http.web.pages import error_page, is_admin, read, render, services_of
from ade_api.http.web.routes import run_lines
from ade_api.http.web.rule_rows import has_manual_trigger, stored_rule, trigger_types
from ade_api.http.web.rule_source import rule_versions, source_text
from ade_tasks.clock import utcnow
from ade_tasks.db import history
from ade_tasks.db import occurrences as occ_db
from ade_tasks.db import one_shots as once_db
from ade_tasks.db import pauses as pauses_db
from ade_tasks.db import rules as rules_db
from ade_tasks.db import run_views as run_views_db
from ade_tasks.db.schema import RuleRow, ScheduledRunRow, ScheduleOccurrenceRow
from ade_tasks.errors import AdeError, NotFoundError
from ade_tasks.json_document import JsonObject
from ade_tasks.rules.rule import Rule
from ade_tasks.rules.schedules import rule_schedules
from ade_tasks.rules.triggers import ScheduleTrigger, TriggerType
from ade_tasks.states import OneShotStatus
from ade_tasks.triggers.health import RuleHealth

router = APIRouter(prefix="/ui", include_in_schema=False)

NEXT_FIRES = 5
OCCURRENCES = 10
#: Scheduled runs still to fire (a claimed one is firing right now and can no longer be
#: cancelled, but has not settled yet).
WAITING = (OneShotStatus.PENDING.value, OneShotStatus.CLAIMED.value)


Fires = tuple[ScheduleTrigger, list[datetime], str, list[str | None]]


def next_fires(rule: Rule, count: int) -> list[Fires]:
    """The next fire times of each schedule trigger in its zone (with how a daylight-saving
    change moved or doubled each), or the trigger's problem, as GET /rules/{id}/schedule
    computes them (a trigger that cannot fire shows why, not a 500)."""
    found = []
    for schedule in rule_schedules(rule, utcnow(), count):
        zone = ZoneInfo(schedule.trigger.timezone) if schedule.times else None
        times = [t.astimezone(zone) for t in schedule.times]
        found.append((schedule.trigger, times, schedule.problem or "", schedule.dst))
    return found


def health_text(health: RuleHealth) -> str:
    """A rule's health in one line: `ready: <paths>`, or its setup errors."""
    if health.ready:
        paths = sorted({t.path for t in health.triggers if t.path})
        return "ready: " + ("; ".join(paths) or "no trigger")
    return "not ready: " + "; ".join(health.errors)


@dataclass(frozen=True)
class RuleLine:
    """A row of the rules table."""

    row: RuleRow
    rule: Rule | None
    manual: bool
    triggers: str
    upcoming: datetime | None
    problems: list[str]
    last: ScheduleOccurrenceRow | None
    health: RuleHealth
    paused: list[pauses_db.Pause]


def _rule_line(
    row: RuleRow,
    last: Sequence[ScheduleOccurrenceRow],
    health: RuleHealth,
    paused: list[pauses_db.Pause],
) -> RuleLine:
    rule = stored_rule(row)
    fires = next_fires(rule, 1) if rule else []
    return RuleLine(
        row=row,
        rule=rule,
        manual=rule is not None and has_manual_trigger(rule),
        triggers=trigger_types(rule) if rule else "unreadable document",
        upcoming=min((times[0] for _, times, _, _ in fires if times), default=None),
        problems=[problem for _, _, problem, _ in fires if problem],
        last=last[0] if last else None,
        health=health,
        paused=paused,
    )


@router.get("/rules")
def rules_page(request: Request) -> HTMLResponse:
    """Every rule: enabled or paused, its health, triggers, the next fire, the last occurrence."""
    settings = services_of(request).settings

    def load(session: Session) -> list[RuleLine]:
        state = live_state(session, settings)
        rows = rules_db.list_rules(session)
        pauses = pauses_db.pauses_of(session, [row.id for row in rows])
        return [
            _rule_line(
                row,
                occ_db.list_for_rule(session, row.id, 1),
                health_of(row, state),
                pauses.get(row.id, []),
            )
            for row in rows
        ]

    return render(request, "rules.html", "Rules", rules=read(request, load), health=health_text)


def pausable_triggers(rule: Rule | None) -> list[tuple[int, str]]:
    """The triggers a pause may hold alone, as (index, label): every one but `manual`."""
    if rule is None:
        return []
    return [
        (index, f"trigger #{index} ({trigger.type})")
        for index, trigger in enumerate(rule.triggers)
        if trigger.type != TriggerType.MANUAL
    ]


def _just_scheduled(session: Session, rule_id: str, scheduled_id: str) -> ScheduledRunRow | None:
    """The scheduled run the run form just stored (named by `?scheduled=`), if it is this
    rule's: the page confirms it."""
    if not scheduled_id:
        return None
    try:
        row = once_db.get_scheduled(session, scheduled_id)
    except NotFoundError:
        return None
    return row if row.rule_id == rule_id else None


@router.get("/rules/{rule_id}")
def rule_page(request: Request, rule_id: str, scheduled: str = "") -> HTMLResponse:
    """One rule: state, health per trigger, pauses, scheduled runs still to fire (cancellable),
    runs per day by outcome and p50/p95 durations over the last 30 days, next fire times,
    recent occurrences with their runs' status, recent runs, its source and its versions."""
    now = utcnow()
    first_day = (now - history.WINDOW + timedelta(days=1)).date()
    since = datetime.combine(first_day, datetime.min.time(), tzinfo=now.tzinfo)
    settings = services_of(request).settings

    def load(session: Session) -> JsonObject:
        row = rules_db.get_rule(session, rule_id)
        runs, _ = run_views_db.list_runs(session, run_views_db.RunFilter(rule_id=rule_id), limit=10)
        return {
            "row": row,
            "health": health_of(row, live_state(session, settings)),
            "pauses": pauses_db.pauses_of(session, [rule_id]).get(rule_id, []),
            "scheduled": once_db.list_scheduled(session, rule_id=rule_id, statuses=WAITING),
            "just_scheduled": _just_scheduled(session, rule_id, scheduled),
            "occurrences": history.occurrence_outcomes(session, rule_id, OCCURRENCES),
            "lines": run_lines(session, runs),
            "days": history.daily_outcomes(session, rule_id, since),
            "stats": history.duration_stats(session, rule_id, since),
            "versions": rule_versions(session, rule_id),
        }

    try:
        found = read(request, load)
    except AdeError as exc:
        return error_page(request, exc)
    row, stats = found["row"], found["stats"]
    rule = stored_rule(row)
    inputs = ""
    if rule is not None and rule.inputs:
        inputs = ", ".join(f"{name} ({spec.type})" for name, spec in rule.inputs.items())
    return render(
        request, "rule.html", f"Rule {row.id}",
        row=row, rule=rule, inputs=inputs,
        triggers=trigger_types(rule) if rule else "",
        manual=rule is not None and has_manual_trigger(rule),
        health=found["health"], health_line=health_text(found["health"]),
        pauses=found["pauses"], pausable=pausable_triggers(rule),
        scheduled=found["scheduled"], just_scheduled=found["just_scheduled"],
        is_admin=is_admin(request), back=f"/ui/rules/{row.id}",
        window_days=history.WINDOW.days, stats=stats,
        outcomes=charts.outcomes_chart(found["days"], first_day, now.date()),
        durations=charts.durations_chart(stats.days, first_day, now.date()),
        fires=next_fires(rule, NEXT_FIRES) if rule else [],
        occurrences=found["occurrences"], lines=found["lines"],
        source=source_text(row.content_hash, row.document), versions=found["versions"],
    )  # fmt: skip
