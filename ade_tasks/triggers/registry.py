"""The trigger matchers by trigger kind: one module per trigger family, and one line per kind.

Adding a trigger kind: its model in `ade_tasks/rules/triggers.py` (a `TriggerType` value and a
model in the `Trigger` union), its family's matcher module here in `ade_tasks/triggers/`, and
one entry in `MATCHERS`. Schedules (claimed by the beat) and manual runs (dispatched by the API)
are never matched against an event, so they have none.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from ade_tasks.db.engine import SessionFactory
from ade_tasks.errors import not_registered
from ade_tasks.rules.triggers import GITHUB_TYPES, TriggerType
from ade_tasks.runs.trigger_events import TriggerEvent
from ade_tasks.triggers.base import Matcher, TriggerTest
from ade_tasks.triggers.filters import filter_matcher
from ade_tasks.triggers.lane import lane_matcher, merged_lane_events
from ade_tasks.triggers.run_finished import run_finished_matcher
from ade_tasks.triggers.webhook import webhook_matcher

MATCHERS: dict[str, Matcher] = {
    **dict.fromkeys(GITHUB_TYPES, filter_matcher),
    TriggerType.GIT_PUSH.value: filter_matcher,
    TriggerType.GIT_COMMIT.value: filter_matcher,
    TriggerType.FILE_CHANGED.value: filter_matcher,
    TriggerType.WEBHOOK.value: webhook_matcher,
    TriggerType.LANE_CREATED.value: lane_matcher,
    TriggerType.LANE_DELETED.value: lane_matcher,
    TriggerType.LANE_MERGED.value: lane_matcher,
    TriggerType.RUN_FINISHED.value: run_finished_matcher,
}

FollowOn = Callable[[SessionFactory, Mapping[str, object]], list[tuple[str, TriggerEvent]]]
"""The further events one event stands for, as (source, event): each is matched and
dispatched like its own event."""

#: Trigger kind -> the events it also stands for (a merged pull request merges lanes too).
FOLLOW_ONS: dict[str, FollowOn] = {
    TriggerType.GITHUB_PR_MERGED.value: merged_lane_events,
}


def matcher_for(kind: str) -> Matcher:
    """The matcher of trigger kind `kind`; NotFoundError listing the kinds this worker knows."""
    try:
        return MATCHERS[kind]
    except KeyError:
        raise not_registered(
            "a trigger kind",
            kind,
            MATCHERS,
            "update the workers to the version that stored the event",
        ) from None


def trigger_test(source: str, kind: str, payload: Mapping[str, object]) -> TriggerTest:
    """The test of a rule's trigger against one event of `kind` from `source`."""
    return matcher_for(kind)(source, payload)


def follow_on_events(
    session_factory: SessionFactory, kind: str, payload: Mapping[str, object]
) -> list[tuple[str, TriggerEvent]]:
    """The further events an event of `kind` stands for (none for most kinds)."""
    follow_on = FOLLOW_ONS.get(kind)
    return follow_on(session_factory, payload) if follow_on is not None else []
