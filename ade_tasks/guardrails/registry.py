"""The guardrails, in the order they are consulted: the first to refuse a run names the
reason, and of equal deadlines the first names the limit reached.

Adding a guardrail: its module in `ade_tasks/guardrails/` (a `Guardrail` overriding the hooks
it needs, declaring the rule fields it reads or its own configuration model) and one line,
`register(MyGuardrail())`, here below the built-in ones. Dispatch, the runner, agent sessions
and rule health consult them through this module's functions, which read `GUARDRAILS` at each
call, so a test may register a toy one and `unregister` it after.
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy.orm import Session

from ade_tasks.guardrails.approval import ApprovalGate
from ade_tasks.guardrails.budget import Budget
from ade_tasks.guardrails.guardrail import (
    Admission,
    Allowance,
    Cost,
    Deadline,
    Guardrail,
    HealthState,
)
from ade_tasks.guardrails.rate import RateLimit
from ade_tasks.guardrails.time_limit import TimeLimit
from ade_tasks.rules.extensions import register_guardrail_config, unregister_guardrail_config
from ade_tasks.rules.rule import Rule
from ade_tasks.settings import Settings

#: The registered guardrails, in the order they are consulted.
GUARDRAILS: tuple[Guardrail, ...] = ()


def register(guardrail: Guardrail) -> None:
    """Consult `guardrail` after those registered before it, and let rules set its own
    configuration; ValueError if one of its name is registered."""
    global GUARDRAILS
    if any(known.name == guardrail.name for known in GUARDRAILS):
        raise ValueError(f"a guardrail named {guardrail.name!r} is registered already")
    if guardrail.config_model is not None:
        register_guardrail_config(guardrail.config_key, guardrail.config_model)
    GUARDRAILS = (*GUARDRAILS, guardrail)


def unregister(guardrail: Guardrail) -> None:
    """Consult `guardrail` no more, and refuse its configuration in rules again."""
    global GUARDRAILS
    GUARDRAILS = tuple(known for known in GUARDRAILS if known is not guardrail)
    if guardrail.config_model is not None:
        unregister_guardrail_config(guardrail.config_key)


register(TimeLimit())
register(RateLimit())
register(Budget())
register(ApprovalGate())


def refusal(admission: Admission, guardrails: Iterable[Guardrail] | None = None) -> str | None:
    """Why the first of `guardrails` (default: all) that refuses the run does; None: all admit."""
    for guardrail in GUARDRAILS if guardrails is None else guardrails:
        reason = guardrail.admit(admission)
        if reason:
            return reason
    return None


def serialized(rule: Rule) -> list[Guardrail]:
    """The guardrails dispatch must consult under the rule's lock."""
    return [guardrail for guardrail in GUARDRAILS if guardrail.serialized(rule)]


def unserialized(rule: Rule) -> list[Guardrail]:
    """The guardrails dispatch consults before it takes any lock."""
    return [guardrail for guardrail in GUARDRAILS if not guardrail.serialized(rule)]


def deadline(session: Session, rule: Rule, settings: Settings, started: float) -> Deadline:
    """The run's deadline: the earliest any guardrail sets (the time limit always sets one)."""
    deadlines = [
        found
        for guardrail in GUARDRAILS
        if (found := guardrail.deadline(session, rule, settings, started)) is not None
    ]
    return min(deadlines, key=lambda found: found.at)


def gate(rule: Rule) -> int | None:
    """The first step index any guardrail makes the run wait before (None: none does)."""
    gates = [found for guardrail in GUARDRAILS if (found := guardrail.gate(rule)) is not None]
    return min(gates, default=None)


def allowance(session: Session, rule: Rule, own: Allowance) -> Allowance:
    """An agent session's own caps, tightened by what every guardrail allows."""
    for guardrail in GUARDRAILS:
        own = own.tightened(guardrail.allowance(session, rule))
    return own


def charge(session: Session, rule: Rule, cost: Cost) -> None:
    """Tell every guardrail what an agent call spent."""
    for guardrail in GUARDRAILS:
        guardrail.charge(session, rule, cost)


def problems(rule: Rule, state: HealthState) -> list[str]:
    """What holds the rule's runs now, in words, as each guardrail's health check says."""
    return [found for guardrail in GUARDRAILS if (found := guardrail.health(rule, state))]
