"""Events turned into runs of the rules whose triggers match them, each through the one dispatch
function: the local events a run emits (a lane created or deleted) and, for the ingress
dispatcher, the events it stored and the further events they stand for (a lane merged).

An event carries a key; each matching rule's run gets `<key>:<rule id>` as its idempotency key,
so an event emitted twice (a retried step, a redelivered message) starts each rule once. The
rules tested are the event's candidates from the event-matching index (by its types and the
index keys its source and payload carry, `registry.event_keys`; `ade_tasks.db.rule_index`), so
an event costs what the rules that can match it cost, not what every stored rule would.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from dataclasses import replace

from ade_tasks.db import rule_triggers
from ade_tasks.db.engine import SessionFactory
from ade_tasks.errors import AdeError
from ade_tasks.rules.rule import Rule
from ade_tasks.runs.dispatch import dispatch_many
from ade_tasks.runs.dispatch_results import DispatchResult
from ade_tasks.runs.senders import RunSender
from ade_tasks.runs.trigger_events import TriggerEvent
from ade_tasks.triggers.lane import SOURCE as LANE_SOURCE
from ade_tasks.triggers.lane import lane_event
from ade_tasks.triggers.matcher import Refusal, TriggerTest
from ade_tasks.triggers.registry import event_keys, trigger_test
from ade_tasks.triggers.verdicts import MatchReport

log = logging.getLogger(__name__)


def matching_rules(
    session_factory: SessionFactory,
    event_type: str | Collection[str],
    match: TriggerTest,
    report: MatchReport | None = None,
    *,
    keys: Collection[str] | None = None,
) -> dict[str, tuple[int, ...]]:
    """Enabled rules with a trigger of `event_type` (or of one of several types) that
    `match(rule, trigger)` accepts: rule id -> the indexes of the triggers that accepted it (a
    paused one holds back only its own). `keys`: the index keys the event carries
    (`registry.event_keys`; None: every rule with a trigger of the type is a candidate). With
    a `report`, the refusals of the candidates no trigger accepted go into it, and so do the
    disabled candidates."""
    return {
        rule.id: indexes
        for rule, indexes in _matches(session_factory, event_type, match, report, keys=keys)
    }


def _matches(
    session_factory: SessionFactory,
    event_type: str | Collection[str],
    match: TriggerTest,
    report: MatchReport | None = None,
    kind: str | None = None,
    *,
    keys: Collection[str] | None,
) -> list[tuple[Rule, tuple[int, ...]]]:
    """(rule, the indexes of its triggers that accepted the event) of every matching rule;
    `kind`: the event's own type, which the report files the verdicts under."""
    types = {event_type} if isinstance(event_type, str) else set(event_type)
    kind = kind or (event_type if isinstance(event_type, str) else min(types))
    disabled: list[str] = []
    with session_factory() as session:
        if report is None:
            candidates = rule_triggers.rules_with_trigger(session, types, keys=keys)
        else:
            candidates, disabled = rule_triggers.trigger_candidates(session, types, keys)
    found: list[tuple[Rule, tuple[int, ...]]] = []
    for rule in candidates:
        indexes: list[int] = []
        refused: list[tuple[int, Refusal]] = []
        for index, trigger in enumerate(rule.triggers):
            if trigger.type not in types:
                continue
            refusal = match(rule, trigger)
            if refusal is None:
                indexes.append(index)
            else:
                refused.append((index, refusal))
        if indexes:
            found.append((rule, tuple(indexes)))
        elif report is not None:
            for index, refusal in refused:
                report.refused(kind, rule.id, index, refusal)
    if report is not None:
        for rule_id in disabled:
            report.disabled(kind, rule_id)
    return found


def emit(
    session_factory: SessionFactory,
    sender: RunSender,
    event: TriggerEvent,
    match: TriggerTest,
    *,
    automations_disabled: bool = False,
    types: Collection[str] = (),
    report: MatchReport | None = None,
    source: str | None = None,
) -> list[tuple[str, DispatchResult | AdeError]]:
    """Dispatch `event` to every matching rule: (rule id, its run or why it was refused).
    One rule refusing the event never blocks the others; `automations_disabled` as for
    `dispatch`. `types`: the trigger types the event starts (default: its own type only); a
    rule's run records the type of the first of its triggers that matched. `source`: where
    the event came from, whose index keys (`registry.event_keys`) narrow the rules read to
    those that can match (None: every rule with a trigger of the types is tested). With a
    `report`, every candidate rule's verdict goes into it."""
    assert event.idempotency_key, "events carry a key so that re-emitting them starts nothing"
    kind = str(event.type)
    types = types or (kind,)
    keys = None if source is None else event_keys(source, types, event.payload)
    matched = _matches(session_factory, types, match, report, kind, keys=keys)
    rule_ids = [rule.id for rule, _ in matched]
    requests = [
        (
            rule.id,
            replace(
                event,
                type=rule.triggers[indexes[0]].type,
                idempotency_key=f"{event.idempotency_key}:{rule.id}",
                trigger_indexes=indexes,
            ),
        )
        for rule, indexes in matched
    ]
    results = dispatch_many(
        session_factory, sender, requests, automations_disabled=automations_disabled
    )
    for (rule_id, indexes), result in zip(
        [(rule.id, indexes) for rule, indexes in matched], results, strict=True
    ):
        if isinstance(result, AdeError):
            log.warning("event %s not dispatched to rule %s: %s", event.type, rule_id, result)
        if report is not None:
            report.dispatched(kind, rule_id, indexes, result)
    return list(zip(rule_ids, results, strict=True))


def emit_lane_event(
    session_factory: SessionFactory,
    sender: RunSender,
    kind: str,
    lane: Mapping[str, object],
    project: str,
    run_id: str,
    *,
    automations_disabled: bool = False,
) -> list[str]:
    """Start the runs of the rules a lane event triggers; their ids."""
    event = lane_event(kind, lane, project, run_id)
    match = trigger_test(LANE_SOURCE, event.type, event.payload)
    results = emit(
        session_factory,
        sender,
        event,
        match,
        automations_disabled=automations_disabled,
        source=LANE_SOURCE,
    )
    return [result.run.id for _, result in results if isinstance(result, DispatchResult)]
