"""The one shape every trigger family's matching has: read the facts its triggers look at from
an event once, then answer, trigger by trigger, whether the event starts it, and if not, why."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from ade_tasks.rules.rule import Rule
from ade_tasks.rules.triggers import Trigger


@dataclass(frozen=True)
class Refusal:
    """Why a trigger does not start on an event: the `filter` that refused it (a trigger field
    such as `branches`, or `type`, `hook`, `project`) and the `reason` in a few words, naming
    the value the filter saw (`branch dev matches none of main`). An event's matching verdicts
    record it, so an operator learns which filter said no (`ade_tasks.triggers.verdicts`)."""

    filter: str
    reason: str


TriggerTest = Callable[[Rule, Trigger], Refusal | None]
"""None when this trigger of this rule starts on the event the test was made for; otherwise
the `Refusal` saying which filter refused it and what it saw."""


class Matcher(Protocol):
    """A trigger family's matching: the test of a rule's trigger against one event, given where
    the event came from (an ingress source such as `github` or `webhook:<hook>`, or `lane`) and
    its payload (a stored event's, which is what a run sees as its trigger). The payload is JSON
    whose shape depends on the source: each family checks the values it reads."""

    def __call__(self, source: str, payload: Mapping[str, object], /) -> TriggerTest: ...
