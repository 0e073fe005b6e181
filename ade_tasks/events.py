"""Local events (a lane created or deleted, later git and file events) turned into runs of the
rules whose triggers match them, each through the one dispatch function.

An event carries a key; each matching rule's run gets `<key>:<rule id>` as its idempotency key,
so an event emitted twice (a retried step, a redelivered message) starts each rule once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from fnmatch import fnmatchcase
from typing import Any

from ade_tasks.db import rules as rules_db
from ade_tasks.db.engine import SessionFactory
from ade_tasks.dispatch import DispatchResult, TaskSender, TriggerEvent, dispatch
from ade_tasks.errors import AdeError
from ade_tasks.rules.models import LaneTrigger

log = logging.getLogger(__name__)


def matching_rules(
    session_factory: SessionFactory, event_type: str, match: Callable[[Any], bool]
) -> list[str]:
    """Ids of enabled rules with a trigger of `event_type` that `match` accepts."""
    with session_factory() as session:
        rows = rules_db.list_rules(session)
        found = []
        for row in rows:
            if not row.enabled:
                continue
            rule = rules_db.load_rule(row)
            if any(t.type == event_type and match(t) for t in rule.triggers):
                found.append(rule.id)
    return found


def emit(
    session_factory: SessionFactory,
    sender: TaskSender,
    event: TriggerEvent,
    match: Callable[[Any], bool],
) -> list[DispatchResult]:
    """Dispatch `event` to every matching rule; one rule refusing it never blocks the others."""
    assert event.idempotency_key, "events carry a key so that re-emitting them starts nothing"
    results = []
    for rule_id in matching_rules(session_factory, str(event.type), match):
        keyed = TriggerEvent(
            event.type, event.summary, event.payload, f"{event.idempotency_key}:{rule_id}"
        )
        try:
            results.append(dispatch(session_factory, sender, rule_id, keyed))
        except AdeError as exc:
            log.warning("event %s not dispatched to rule %s: %s", event.type, rule_id, exc)
    return results


def lane_event(kind: str, lane: dict[str, Any], project: str, run_id: str) -> TriggerEvent:
    """`lane.created` / `lane.deleted` for a lane of `project`, emitted by run `run_id`."""
    return TriggerEvent(
        kind,
        f"{kind} {lane['name']!r} by run {run_id}",
        {"lane": lane, "project": project, "source_run": run_id},
        f"{kind}:{lane['id'] or lane['path']}",
    )


def lane_matcher(name: str) -> Callable[[Any], bool]:
    """Does a lane trigger's `lanes` globs (none: every lane) accept this lane name?"""

    def match(trigger: Any) -> bool:
        assert isinstance(trigger, LaneTrigger)
        return not trigger.lanes or any(fnmatchcase(name, glob) for glob in trigger.lanes)

    return match
