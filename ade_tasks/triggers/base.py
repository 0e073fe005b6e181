"""The one shape every trigger family's matching has: read the facts its triggers look at from
an event once, then answer, trigger by trigger, whether the event starts it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol

from ade_tasks.rules.rule import Rule
from ade_tasks.rules.triggers import Trigger

TriggerTest = Callable[[Rule, Trigger], bool]
"""Does this trigger of this rule start on the event the test was made for?"""


class Matcher(Protocol):
    """A trigger family's matching: the test of a rule's trigger against one event, given where
    the event came from (an ingress source such as `github` or `webhook:<hook>`, or `lane`) and
    its payload (a stored event's, which is what a run sees as its trigger). The payload is JSON
    whose shape depends on the source: each family checks the values it reads."""

    def __call__(self, source: str, payload: Mapping[str, object], /) -> TriggerTest: ...
