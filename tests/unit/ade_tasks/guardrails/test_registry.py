"""The guardrail registry: a guardrail registered in `GUARDRAILS` is consulted by dispatch, by
the worker that claims the run, for the run's deadline, and when an agent call costs, without
any caller naming it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from sqlalchemy.orm import Session

from ade_tasks.clock import utcnow
from ade_tasks.db import runs as runs_db
from ade_tasks.db import usage as usage_db
from ade_tasks.db.engine import SessionFactory
from ade_tasks.db.schema import RunRow
from ade_tasks.guardrails import registry
from ade_tasks.guardrails.guardrail import Admission, Allowance, Cost, Deadline, Guardrail
from ade_tasks.rules.rule import Rule
from ade_tasks.runs.dispatch import dispatch
from ade_tasks.runs.trigger_events import TriggerEvent
from ade_tasks.settings import Settings
from ade_tasks.states import RunStatus
from ade_tasks.testing import InMemorySender
from ade_workers.actions import agent_session
from ade_workers.engine.runner import execute_run
from ade_workers.engine.runner_config import RunnerConfig
from tests.unit.ade_workers.agents.session_support import ScriptedProvider, turn
from tests.unit.conftest import add_rule

BUILT_IN = """id: r
triggers: [{type: manual}]
execution: {kind: built-in, actions: [{id: a, type: run-command, command: "sleep 0.5"}]}
"""


class Recording(Guardrail):
    """A fake guardrail: records what it was asked and answers as told."""

    name = "recording"

    def __init__(self, refuse: str | None = None, stop_after: float | None = None) -> None:
        self.refuse = refuse
        self.stop_after = stop_after
        self.admissions: list[tuple[str, str]] = []
        self.charges: list[tuple[str, Cost]] = []

    def admit(self, admission: Admission) -> str | None:
        where = "dispatch" if admission.settings is None else "claim"
        self.admissions.append((admission.rule.id, where))
        return self.refuse

    def deadline(
        self, session: Session, rule: Rule, settings: Settings, started: float
    ) -> Deadline | None:
        if self.stop_after is None:
            return None
        return Deadline(started + self.stop_after, "the recording guardrail's limit")

    def charge(self, session: Session, rule: Rule, cost: Cost) -> None:
        self.charges.append((rule.id, cost))


@pytest.fixture
def register() -> Iterator[Callable[[Guardrail], None]]:
    """Register a guardrail as a guardrail module does (one line), and unregister it after."""
    registered: list[Guardrail] = []

    def add(guardrail: Guardrail) -> None:
        registry.register(guardrail)
        registered.append(guardrail)

    yield add
    for guardrail in registered:
        registry.unregister(guardrail)


@pytest.fixture
def fake(register: Callable[[Guardrail], None]) -> Recording:
    """A recording guardrail registered after the real ones."""
    recording = Recording()
    register(recording)
    return recording


def run_of(session_factory: SessionFactory, run_id: str) -> RunRow:
    with session_factory() as session:
        run = runs_db.get_run(session, run_id)
        session.expunge(run)
    return run


def test_a_registered_guardrail_is_consulted_at_dispatch_and_at_claim(
    session_factory: SessionFactory, rules_dir: Path, config: RunnerConfig, fake: Recording
) -> None:
    add_rule(session_factory, rules_dir, "r", BUILT_IN)

    run = dispatch(session_factory, InMemorySender(), "r", TriggerEvent.manual()).run
    assert fake.admissions == [("r", "dispatch")]
    assert execute_run(session_factory, config, run.id, "w1") == RunStatus.SUCCEEDED
    assert fake.admissions == [("r", "dispatch"), ("r", "claim")]


def test_a_registered_guardrail_that_refuses_skips_the_trigger_with_its_reason(
    session_factory: SessionFactory, rules_dir: Path, register: Callable[[Guardrail], None]
) -> None:
    sender = InMemorySender()
    register(Recording(refuse="skipped: the recording guardrail says no"))
    add_rule(session_factory, rules_dir, "r", BUILT_IN)

    run = dispatch(session_factory, sender, "r", TriggerEvent.manual()).run

    assert run.status == RunStatus.SKIPPED
    assert run.error == "skipped: the recording guardrail says no"
    assert sender.sent == []


def test_a_registered_guardrails_deadline_stops_the_run_naming_it(
    session_factory: SessionFactory,
    rules_dir: Path,
    config: RunnerConfig,
    register: Callable[[Guardrail], None],
) -> None:
    add_rule(session_factory, rules_dir, "r", BUILT_IN.replace("sleep 0.5", "sleep 30"))
    run = dispatch(session_factory, InMemorySender(), "r", TriggerEvent.manual()).run
    register(Recording(stop_after=0.5))

    assert execute_run(session_factory, config, run.id, "w1") == RunStatus.TIMED_OUT
    assert "the recording guardrail's limit was reached" in (
        run_of(session_factory, run.id).error or ""
    )


class ClosingProvider(ScriptedProvider):
    def close(self) -> None:
        pass


def test_a_registered_guardrail_is_charged_what_an_agent_session_spent(
    session_factory: SessionFactory,
    rules_dir: Path,
    config: RunnerConfig,
    fake: Recording,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    provider = ClosingProvider(turn(text="All done.", tokens=(10, 5)))
    monkeypatch.setattr(agent_session, "http_provider", lambda *_: provider)
    add_rule(session_factory, rules_dir, "r", """id: r
triggers: [{type: manual}]
execution: {kind: agent-session, provider: openai, model: m, prompt: "Say hello."}
""")  # fmt: skip
    run = dispatch(session_factory, InMemorySender(), "r", TriggerEvent.manual()).run

    assert execute_run(session_factory, config, run.id, "w1") == RunStatus.SUCCEEDED

    assert fake.charges == [("r", Cost(tokens=15, cost_usd=0.0))]
    with session_factory() as session:  # the budget, registered before it, was charged too
        assert usage_db.usage_on(session, usage_db.day_of(utcnow()), "auto:r").tokens == 15


def test_an_allowance_tightens_each_cap_to_the_smaller() -> None:
    own = Allowance(tokens=1000, cost_usd=None)

    tightened = own.tightened(Allowance(tokens=200, cost_usd=1.5))

    assert tightened == Allowance(tokens=200, cost_usd=1.5)
    assert tightened.tightened(Allowance()) == tightened


def test_the_first_refusing_guardrail_names_the_reason(session_factory: SessionFactory) -> None:
    first, second = Recording(refuse="first"), Recording(refuse="second")
    rule: Any = SimpleNamespace(id="r")

    with session_factory() as session:
        reason = registry.refusal(Admission(session, rule, utcnow()), [first, second])

    assert reason == "first"
    assert first.admissions == [("r", "dispatch")]
    assert second.admissions == []
