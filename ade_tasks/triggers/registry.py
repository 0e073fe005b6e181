"""The trigger kinds: one declaration per trigger model, and this one line per model.

A `TriggerKind` says everything the engine needs of a trigger model beside the model itself: the
check that says whether it can fire (rule health), the matcher that tests it against an event,
and the further events one of its events stands for. `MATCHERS`, `FOLLOW_ONS` and the readiness
checks are derived from `KINDS`.

Adding a trigger kind: one module holding its model (a `TriggerDocument` whose `type` literal
names its kinds), its matcher and its readiness check, declared as one `TriggerKind`, and one
line, `register(MY_KIND)`, which also lets rules name it (the model joins `TRIGGER_MODELS`, from
which the `Trigger` union is derived). The built-in kinds register the same way, below; their
models are listed in `ade_tasks.rules.triggers.TRIGGER_MODELS` as well, because rules are
validated in the `rules` room, which cannot import this one. Schedules (claimed by the beat) and
manual runs (dispatched by the API) are never matched against an event, so they have no matcher.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field

from ade_tasks.db.engine import SessionFactory
from ade_tasks.errors import not_registered
from ade_tasks.rules.extensions import register_trigger_model, unregister_trigger_model
from ade_tasks.rules.triggers import (
    FileTrigger,
    GithubTrigger,
    GitTrigger,
    LaneTrigger,
    ManualTrigger,
    RunFinishedTrigger,
    ScheduleTrigger,
    TriggerDocument,
    TriggerType,
    WebhookTrigger,
    trigger_kinds,
)
from ade_tasks.runs.trigger_events import TriggerEvent
from ade_tasks.triggers import readiness
from ade_tasks.triggers.filters import filter_matcher, repo_keys
from ade_tasks.triggers.lane import lane_matcher, merged_lane_events
from ade_tasks.triggers.matcher import Matcher, TriggerTest
from ade_tasks.triggers.readiness import ReadinessCheck
from ade_tasks.triggers.run_finished import followed_keys, run_finished_matcher
from ade_tasks.triggers.webhook import hook_keys, webhook_matcher

EventKeys = Callable[[str, Mapping[str, object]], Collection[str]]
"""The values an event (its source and payload) carries for its trigger model's `index_field`,
by which the event-matching index narrows the rules it reads (`ade_tasks.db.rule_index`)."""

FollowOn = Callable[[SessionFactory, Mapping[str, object]], list[tuple[str, TriggerEvent]]]
"""The further events one event stands for, as (source, event): each is matched and
dispatched like its own event."""


@dataclass(frozen=True)
class TriggerKind:
    """Everything about one trigger model: the kinds it answers to are its `type` literal."""

    model: type[TriggerDocument]
    #: Can a trigger of this model fire, and by which path (rule health).
    ready: ReadinessCheck
    #: Its test against an event; None: never matched against an event.
    matcher: Matcher | None = None
    #: Kind -> the events an event of that kind also stands for.
    follow_ons: Mapping[str, FollowOn] = field(default_factory=dict)
    #: The values an event carries for the model's `index_field`; None: the model declares
    #: none, so every rule with a trigger of the kind is a candidate for every event of it.
    event_keys: EventKeys | None = None

    @property
    def kinds(self) -> tuple[str, ...]:
        """The trigger kinds (`type` values) it declares."""
        return trigger_kinds(self.model)


#: Every registered kind, in the order registered (the built-ins below first).
KINDS: tuple[TriggerKind, ...] = ()


def register(kind: TriggerKind) -> None:
    """Let rules name the kinds `kind` declares, match its events and report its readiness;
    ValueError if one of its kinds is registered already."""
    global KINDS
    if kind not in KINDS:
        register_trigger_model(kind.model)
        KINDS = (*KINDS, kind)


def unregister(kind: TriggerKind) -> None:
    """Rules may no longer name `kind`'s kinds, nor its events be matched."""
    global KINDS
    KINDS = tuple(known for known in KINDS if known is not kind)
    unregister_trigger_model(kind.model)


# The built-in kinds, one line each, as any other kind registers.
register(TriggerKind(ScheduleTrigger, readiness.schedule_ready))
register(TriggerKind(ManualTrigger, readiness.manual_ready))
register(
    TriggerKind(WebhookTrigger, readiness.webhook_ready, webhook_matcher, event_keys=hook_keys)
)
register(
    TriggerKind(
        GithubTrigger,
        readiness.github_ready,
        filter_matcher,
        # a merged pull request merges lanes too
        {TriggerType.GITHUB_PR_MERGED.value: merged_lane_events},
        event_keys=repo_keys,
    )
)
register(TriggerKind(GitTrigger, readiness.local_ready, filter_matcher))
register(TriggerKind(LaneTrigger, readiness.lane_ready, lane_matcher))
register(TriggerKind(FileTrigger, readiness.local_ready, filter_matcher))
register(
    TriggerKind(
        RunFinishedTrigger,
        readiness.run_finished_ready,
        run_finished_matcher,
        event_keys=followed_keys,
    )
)


def matchers() -> dict[str, Matcher]:
    """Trigger kind -> its matcher, for every kind matched against events."""
    return {
        kind: declared.matcher
        for declared in KINDS
        if declared.matcher is not None
        for kind in declared.kinds
    }


def matcher_for(kind: str) -> Matcher:
    """The matcher of trigger kind `kind`; NotFoundError listing the kinds this worker knows."""
    known = matchers()
    try:
        return known[kind]
    except KeyError:
        raise not_registered(
            "a trigger kind",
            kind,
            known,
            "update the workers to the version that stored the event",
        ) from None


def readiness_check(model: type[TriggerDocument]) -> ReadinessCheck:
    """The readiness check of a trigger model's kind."""
    return next(declared.ready for declared in KINDS if declared.model is model)


def trigger_test(source: str, kind: str, payload: Mapping[str, object]) -> TriggerTest:
    """The test of a rule's trigger against one event of `kind` from `source`."""
    return matcher_for(kind)(source, payload)


def event_keys(
    source: str, kinds: Collection[str], payload: Mapping[str, object]
) -> frozenset[str]:
    """The index keys an event of `kinds` from `source` carries (for `local_events.emit`)."""
    return frozenset(
        key
        for declared in KINDS
        if declared.event_keys is not None and not set(declared.kinds).isdisjoint(kinds)
        for key in declared.event_keys(source, payload)
    )


def follow_on_events(
    session_factory: SessionFactory, kind: str, payload: Mapping[str, object]
) -> list[tuple[str, TriggerEvent]]:
    """The further events an event of `kind` stands for (none for most kinds)."""
    for declared in KINDS:
        follow_on = declared.follow_ons.get(kind)
        if follow_on is not None:
            return follow_on(session_factory, payload)
    return []
