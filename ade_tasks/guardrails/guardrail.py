"""The hooks every guardrail may implement: admit a run (at dispatch, and when a worker claims
it), bound it while it runs (a deadline, an approval gate, an agent's allowance), count what a
step or agent call spent, and say in rule health what holds a rule's runs now.

A guardrail also declares what it reads of a rule: the built-in ones fields of
`ade_tasks.rules.guardrails.Guardrails` (`rule_fields`); a guardrail of its own its configuration
model (`config_model`), which a rule sets under `guardrails: {<config_key>: ...}` once the
guardrail is registered (`ade_tasks.guardrails.registry.register`).

`Guardrail` is a base class whose hooks have nothing to say (Dramatiq's `Middleware`): a
guardrail overrides the ones it needs.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import ClassVar, Protocol, TypeVar

from sqlalchemy.orm import Session

from ade_tasks.rules.document import Document
from ade_tasks.rules.rule import Rule
from ade_tasks.settings import Settings


@dataclass(frozen=True)
class Admission:
    """A trigger or a claimed run asking to start."""

    session: Session
    rule: Rule
    now: datetime
    #: The worker's settings when a worker admits the run it claimed; None at dispatch, where
    #: only the rule's own limits are known (the cluster's caps are worker settings).
    settings: Settings | None = None


@dataclass(frozen=True)
class Deadline:
    """When a run must stop (`time.monotonic()`), and which limit that is."""

    at: float
    reason: str


@dataclass(frozen=True)
class Allowance:
    """What an agent session may still spend (None: no cap)."""

    tokens: int | None = None
    cost_usd: float | None = None

    def tightened(self, other: Allowance) -> Allowance:
        """The smaller of each cap."""
        return Allowance(_least(self.tokens, other.tokens), _least(self.cost_usd, other.cost_usd))


@dataclass(frozen=True)
class Cost:
    """What an agent call spent, charged to its rule's billing code."""

    tokens: int = 0
    cost_usd: float = 0.0


N = TypeVar("N", int, float)


def _least(a: N | None, b: N | None) -> N | None:
    if a is None:
        return b
    return a if b is None else min(a, b)


class HealthState(Protocol):
    """What a guardrail's health check looks at (`ade_tasks.triggers.health.LiveState` is one)."""

    @property
    def now(self) -> datetime: ...


class Guardrail:
    """A limit the engine holds runs to; every hook here says nothing, so a guardrail
    overrides only the hooks it needs.

    A run's own seconds are not charged through `charge`: the statement that records the run's
    outcome adds them to its billing code's usage (one statement, so they count exactly once
    even when it is retried), where guardrails read them.
    """

    #: What the guardrail is called (for a reader: tests, a debugger, a log line).
    name = "guardrail"
    #: The fields of a rule's `guardrails:` it reads (the docs' table of guardrails lists them).
    rule_fields: ClassVar[tuple[str, ...]] = ()
    #: The model of its own configuration under `guardrails: {config_key: ...}` (None: it reads
    #: only fields of its `rule_fields`); registering the guardrail lets rules set it.
    config_model: ClassVar[type[Document] | None] = None
    config_key: ClassVar[str] = ""

    def config(self, rule: Rule) -> Document | None:
        """Its own configuration in the rule (None: the rule sets none)."""
        found = getattr(rule.guardrails, self.config_key, None) if self.config_model else None
        return found if isinstance(found, Document) else None

    def health(self, rule: Rule, state: HealthState) -> str | None:
        """What holds the rule's runs now, in words, for rule health (None: nothing does)."""
        return None

    def serialized(self, rule: Rule) -> bool:
        """Must dispatch admit the rule's runs under its lock, because admission counts the
        rule's runs and racing triggers must see each other? (Answered without the database.)"""
        return False

    def admit(self, admission: Admission) -> str | None:
        """Why the run must not start (it is recorded `skipped` with this reason); None: it
        may."""
        return None

    def deadline(
        self, session: Session, rule: Rule, settings: Settings, started: float
    ) -> Deadline | None:
        """When a run of the rule that started at monotonic time `started` must stop."""
        return None

    def gate(self, rule: Rule) -> int | None:
        """Before which step index the run waits for a human (None: it never waits)."""
        return None

    def allowance(self, session: Session, rule: Rule) -> Allowance:
        """What an agent session of the rule may still spend."""
        return Allowance()

    def charge(self, session: Session, rule: Rule, cost: Cost) -> None:
        """Count what an agent call of the rule's run spent (in the caller's transaction)."""
        return None
