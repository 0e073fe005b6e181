"""Finding the events to notify of in the system of record, and queueing them in the outbox.

`queue_events` reads what happened in the last `LOOKBACK` (runs that finished failed or
timed out, approvals and questions requested and still pending, schedule occurrences recorded
missed) plus, when given a health view, each enabled rule's health against the one it last
saw. Each event has a stable key (`run.failed:<run id>`, `approval.waiting:<approval id>`,
`occurrence.missed:<rule>:<trigger>:<claimed at>`, `occurrence.missed:once:<scheduled run id>`,
`rule.health_changed:<rule>:<seen at>`), and
the outbox takes each (key, route) once, so two sweeps over the same window, a redelivered
finish or a retried sweep never notify twice.

Choices where the issue is silent: missed occurrences are grouped per trigger and claim (a beat
that was down for a day records up to 1,000 missed slots at once: one notification says so); a
scheduled one-shot run (a `run_at`/`delay_seconds` trigger, `ade-tasks run --at/--in`) recorded
`missed` is an `occurrence.missed` of its own, one per scheduled run (one recorded `skipped` is
not: its rule refused it, as a skipped schedule slot is not notified either);
the first health a sweep sees of a rule is its baseline, not a change; an event older than
`LOOKBACK` when notifications are first configured (or housekeeping was down longer) is not
notified, rather than flooding the routes with old news.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime, timedelta

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from ade_tasks.db import cursors as cursors_db
from ade_tasks.db import notifications as outbox
from ade_tasks.db import rules as rules_db
from ade_tasks.db.engine import SessionFactory
from ade_tasks.db.notifications import Notice
from ade_tasks.db.schema import (
    QUESTION_TOOL,
    ApprovalRow,
    RuleRow,
    RunRow,
    ScheduledRunRow,
    ScheduleOccurrenceRow,
)
from ade_tasks.notifications.routing import routes_for, unknown_routes
from ade_tasks.rules.notify import NotificationEvent, NotifyPolicy
from ade_tasks.settings import NotificationSettings
from ade_tasks.states import OccurrenceOutcome, OneShotStatus, RunStatus

log = logging.getLogger(__name__)

#: How far back a sweep looks for events (the outbox keeps settled rows longer: `outbox.KEEP`).
LOOKBACK = timedelta(hours=1)
#: The ingress-cursor source under which the last health seen of each rule is kept.
HEALTH_CURSOR = "notify-health:"
#: Health as the sweep compares it: rule id -> "ready" or "not ready: <what stops it>".
HealthView = Callable[[Session], Mapping[str, str]]

_RUN_EVENTS = {
    RunStatus.FAILED.value: NotificationEvent.RUN_FAILED,
    RunStatus.TIMED_OUT.value: NotificationEvent.RUN_TIMED_OUT,
}


def queue_events(
    session_factory: SessionFactory,
    settings: NotificationSettings,
    now: datetime,
    *,
    link_base: str = "",
) -> int:
    """Queue the notifications of every run, approval, question, missed occurrence and missed
    one-shot since `now - LOOKBACK` not queued yet (the module docstring): how many were
    queued. Nothing without routes."""
    if not settings.routes:
        return 0
    queued = 0
    with session_factory.begin() as session:
        policies = _Policies(session, settings)
        notices = [
            *_finished_runs(session, now, link_base),
            *_waiting_inputs(session, now, link_base),
            *_missed_occurrences(session, now, link_base),
            *_missed_one_shots(session, now, link_base),
        ]
        known = outbox.known_keys(session, {notice.key for notice, _ in notices})
        for notice, event in notices:
            if notice.key not in known:
                routes = policies.routes(notice.rule_id, event)
                queued += outbox.add(session, notice, routes, now)
    return queued


def queue_health_changes(
    session_factory: SessionFactory,
    settings: NotificationSettings,
    health: HealthView,
    now: datetime,
    *,
    link_base: str = "",
) -> int:
    """Queue a notification for each rule whose health (`health`, judged where the API runs,
    as `rules show` judges it) differs from the last one seen: how many were queued."""
    if not settings.routes:
        return 0
    queued = 0
    event = NotificationEvent.RULE_HEALTH_CHANGED
    with session_factory.begin() as session:
        policies = _Policies(session, settings)
        for notice in _health_changes(session, health(session), now, link_base):
            queued += outbox.add(session, notice, policies.routes(notice.rule_id, event), now)
    return queued


class _Policies:
    """Each rule's `notify:` as stored now, read once per sweep; an unknown route is logged."""

    def __init__(self, session: Session, settings: NotificationSettings) -> None:
        self._session = session
        self._routes = settings.routes
        self._policies: dict[str, NotifyPolicy | None] = {}

    def routes(self, rule_id: str | None, event: NotificationEvent) -> list[str]:
        return routes_for(event, self._policy(rule_id), self._routes)

    def _policy(self, rule_id: str | None) -> NotifyPolicy | None:
        if rule_id is None:
            return None
        if rule_id not in self._policies:
            row = self._session.get(RuleRow, rule_id)
            try:
                policy = None if row is None else rules_db.load_rule(row).notify
            except Exception:  # an unreadable stored rule still notifies through every route
                policy = None
            missing = unknown_routes(policy, self._routes)
            if missing:
                log.warning(
                    "rule %r: notify.routes names %s, which these settings do not configure "
                    "(configured: %s); set ADE_NOTIFICATIONS__ROUTES__<name>__URL or fix the rule",
                    rule_id, ", ".join(missing), ", ".join(sorted(self._routes)) or "none",
                )  # fmt: skip
            self._policies[rule_id] = policy
        return self._policies[rule_id]


def _link(link_base: str, path: str) -> str:
    return f"\n{link_base.rstrip('/')}{path}" if link_base else ""


def _finished_runs(
    session: Session, now: datetime, link_base: str
) -> Iterator[tuple[Notice, NotificationEvent]]:
    query = select(RunRow).where(
        RunRow.finished_at >= now - LOOKBACK, RunRow.status.in_(sorted(_RUN_EVENTS))
    )
    for run in session.scalars(query):
        event = _RUN_EVENTS[run.status]
        outcome = "timed out" if event is NotificationEvent.RUN_TIMED_OUT else "failed"
        lines = [
            f"Run {run.id} of rule {run.rule_id} {outcome}.",
            f"Error: {run.error or '(none recorded)'}",
            f"Trigger: {run.trigger_type} {run.trigger_summary}".rstrip(),
        ]
        notice = Notice(
            key=f"{event.value}:{run.id}",
            event=event.value,
            title=f"ADE: rule {run.rule_id}: run {outcome}",
            body="\n".join(lines) + _link(link_base, f"/ui/runs/{run.id}"),
            rule_id=run.rule_id,
            run_id=run.id,
        )
        yield notice, event


def _waiting_inputs(
    session: Session, now: datetime, link_base: str
) -> Iterator[tuple[Notice, NotificationEvent]]:
    query = (
        select(ApprovalRow, RunRow.rule_id)
        .join(RunRow, RunRow.id == ApprovalRow.run_id)
        .where(ApprovalRow.status == "pending", ApprovalRow.requested_at >= now - LOOKBACK)
    )
    for approval, rule_id in session.execute(query):
        question = approval.tool == QUESTION_TOOL
        event = (
            NotificationEvent.QUESTION_WAITING if question else NotificationEvent.APPROVAL_WAITING
        )
        what = "asks a question" if question else "waits for approval"
        answer = {
            "question": f'Answer: ade-tasks inputs answer {approval.id} accept --note "..."',
            "tool_call": f"Answer: ade-tasks inputs answer {approval.id} accept (or decline)",
            "gate": f"Answer: ade-tasks runs approve {approval.run_id} (or runs reject)",
        }[approval.kind]
        lines = [f"Run {approval.run_id} of rule {rule_id} {what}:", approval.reason, answer]
        notice = Notice(
            key=f"{event.value}:{approval.id}",
            event=event.value,
            title=f"ADE: rule {rule_id}: run {what}",
            body="\n".join(lines) + _link(link_base, f"/ui/runs/{approval.run_id}"),
            rule_id=rule_id,
            run_id=approval.run_id,
        )
        yield notice, event


def _missed_occurrences(
    session: Session, now: datetime, link_base: str
) -> Iterator[tuple[Notice, NotificationEvent]]:
    occ = ScheduleOccurrenceRow
    query = (
        select(
            occ.rule_id,
            occ.trigger_index,
            occ.cron,
            occ.claimed_at,
            func.count(),
            func.min(occ.slot),
            func.max(occ.slot),
        )
        .where(occ.outcome == OccurrenceOutcome.MISSED.value, occ.claimed_at >= now - LOOKBACK)
        .group_by(occ.rule_id, occ.trigger_index, occ.cron, occ.claimed_at)
    )
    event = NotificationEvent.OCCURRENCE_MISSED
    for rule_id, index, cron, claimed_at, count, first, last in session.execute(query):
        slots = f"{count} slot{'s' if count != 1 else ''}"
        span = first.isoformat() if count == 1 else f"{first.isoformat()} .. {last.isoformat()}"
        body = (
            f"Rule {rule_id}, trigger {index} ({cron}): {slots} missed ({span} UTC): no beat "
            "fired them within the trigger's catchup_window. `ade-tasks rules backfill` can "
            "run them now."
        )
        notice = Notice(
            key=f"{event.value}:{rule_id}:{index}:{claimed_at.isoformat()}",
            event=event.value,
            title=f"ADE: rule {rule_id}: {slots} of its schedule missed",
            body=body + _link(link_base, f"/ui/rules/{rule_id}"),
            rule_id=rule_id,
        )
        yield notice, event


def _missed_one_shots(
    session: Session, now: datetime, link_base: str
) -> Iterator[tuple[Notice, NotificationEvent]]:
    once = ScheduledRunRow
    query = select(once).where(
        once.status == OneShotStatus.MISSED.value, once.claimed_at >= now - LOOKBACK
    )
    event = NotificationEvent.OCCURRENCE_MISSED
    for row in session.scalars(query):
        source = (
            f"manual, by {row.requested_by or 'an operator'}"
            if row.trigger_index is None
            else f"trigger {row.trigger_index}, {row.spec}"
        )
        lines = [
            f"Scheduled run {row.id} of rule {row.rule_id} ({source}) was missed:",
            row.reason or "(no reason recorded)",
            f"Run it now: ade-tasks run {row.rule_id}",
        ]
        notice = Notice(
            key=f"{event.value}:once:{row.id}",
            event=event.value,
            title=f"ADE: rule {row.rule_id}: a scheduled run missed",
            body="\n".join(lines) + _link(link_base, f"/ui/rules/{row.rule_id}"),
            rule_id=row.rule_id,
        )
        yield notice, event


def _health_changes(
    session: Session, health: Mapping[str, str], now: datetime, link_base: str
) -> Iterator[Notice]:
    """The rules whose health differs from the last one seen (stored as ingress cursors),
    recording the new one; a rule seen the first time sets its baseline quietly."""
    event = NotificationEvent.RULE_HEALTH_CHANGED
    for rule_id, state in sorted(health.items()):
        source = f"{HEALTH_CURSOR}{rule_id}"
        before = cursors_db.read(session, source)
        if before == state:
            continue
        cursors_db.write(session, source, state, by="notifications", now=now)
        if before is None:
            continue
        yield Notice(
            key=f"{event.value}:{rule_id}:{now.isoformat()}",
            event=event.value,
            title=f"ADE: rule {rule_id} is {state.partition(':')[0]}",
            body=f"Rule {rule_id} was {before}\nand is now {state}."
            + _link(link_base, f"/ui/rules/{rule_id}"),
            rule_id=rule_id,
        )
