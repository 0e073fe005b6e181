"""The worker side of ingress: match a stored event to the rules whose triggers fit it and
dispatch it to each (`ade.ingress.dispatch`).

Every outcome is recorded on the event: the runs it started, the rules that refused it, or the
error that stopped it. An event that raises is marked `failed` and never blocks the next one.
"""

from __future__ import annotations

import logging
from typing import Any

from ade_tasks.db import ingress as ingress_db
from ade_tasks.db import lanes as lanes_db
from ade_tasks.db.engine import SessionFactory
from ade_tasks.db.schema import IngressStatus
from ade_tasks.dispatch import DispatchResult, TaskSender, TriggerEvent
from ade_tasks.errors import AdeError
from ade_tasks.events import emit, lane_matcher
from ade_tasks.ingress.event import NormalizedEvent
from ade_tasks.ingress.filters import trigger_matches
from ade_tasks.ingress.hooks import JsonFilter, filters_match
from ade_tasks.rules.models import WebhookTrigger

log = logging.getLogger(__name__)

WEBHOOK_PREFIX = "webhook:"


def dispatch_ingress_event(
    session_factory: SessionFactory, sender: TaskSender, event_id: int
) -> IngressStatus | None:
    """Match and dispatch one stored event; None when it was already handled (a redelivery)."""
    with session_factory() as session:
        row = ingress_db.get_event(session, event_id)
        if row is None or row.status != IngressStatus.RECEIVED:
            return None
        source, delivery, payload = row.source, row.delivery_id or str(row.id), dict(row.payload)
        trigger_type, summary = row.trigger_type, row.summary
    runs: list[str] = []
    refusals: list[str] = []
    try:
        if trigger_type is not None:
            event = TriggerEvent(trigger_type, summary, payload, f"{source}:{delivery}")
            for rule_id, result in emit(session_factory, sender, event, _matcher(source, payload)):
                if isinstance(result, DispatchResult):
                    runs.append(result.run.id)
                else:
                    refusals.append(f"rule {rule_id!r}: {result.message}")
        if trigger_type == "github.pr_merged":
            runs += _lanes_merged(session_factory, sender, payload)
        status, error = IngressStatus.DISPATCHED, "; ".join(refusals) or None
    except Exception as exc:  # recorded on the event; the next event is not held up
        log.exception("ingress event %s could not be dispatched", event_id)
        detail = exc.message if isinstance(exc, AdeError) else repr(exc)
        status, error = IngressStatus.FAILED, f"matching or dispatching failed: {detail}"
    with session_factory.begin() as session:
        ingress_db.finish_event(session, event_id, status, runs, error)
    return status


def _matcher(source: str, payload: dict[str, Any]) -> Any:
    """Which of a rule's triggers accept this event."""
    if source.startswith(WEBHOOK_PREFIX):
        hook = source.removeprefix(WEBHOOK_PREFIX)
        body = payload.get("body")

        def webhook(_rule: Any, trigger: Any) -> bool:
            assert isinstance(trigger, WebhookTrigger)
            filters = [
                JsonFilter(path=path, op="equals", value=value)
                for path, value in trigger.filters.items()
            ]
            return trigger.hook == hook and filters_match(filters, body)[0]

        return webhook
    event = NormalizedEvent.from_payload(payload)
    return lambda _rule, trigger: trigger_matches(trigger, event)


def _lanes_merged(
    session_factory: SessionFactory, sender: TaskSender, payload: dict[str, Any]
) -> list[str]:
    """A merged pull request from a lane's branch is that lane's `lane.merged` event, keyed by
    the pull request so it fires once however often the delivery is seen."""
    branch, repo, number = payload.get("branch"), payload.get("repo"), payload.get("number")
    if not branch:
        return []
    with session_factory() as session:
        lanes = lanes_db.lanes_on_branch(session, str(branch))
        found = [(row.project, lanes_db.lane_ref(row).to_dict()) for row in lanes]
    runs = []
    for project, lane in found:
        event = TriggerEvent(
            "lane.merged",
            f"lane {lane['name']!r} merged by {repo}#{number}",
            {"event": "lane.merged", "lane": lane, "project": project, "pull_request": payload},
            f"lane.merged:{repo}#{number}:{lane['id']}",
        )
        for _, result in emit(session_factory, sender, event, lane_matcher(lane["name"], project)):
            if isinstance(result, DispatchResult):
                runs.append(result.run.id)
    return runs
