"""An extension is one module plus one registration line: a toy action type, a toy trigger kind
and a toy guardrail (`tests/unit/extensions/toys/`), each registered by one line below, validate in
a rule, run, and report health like the built-in ones, and unregistered are unknown again; the
registries they join are the only lists the engine consults."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Literal

import pytest

from ade_tasks.clock import utcnow
from ade_tasks.db import run_steps as run_steps_db
from ade_tasks.db.engine import SessionFactory
from ade_tasks.guardrails import registry as guardrail_registry
from ade_tasks.guardrails.approval import approval_gate
from ade_tasks.guardrails.budget import Budget
from ade_tasks.limits import load_yaml
from ade_tasks.rules import steps, triggers
from ade_tasks.rules.loader import parse_rule
from ade_tasks.rules.rule import Rule
from ade_tasks.rules.triggers import TriggerDocument
from ade_tasks.runs.dispatch import dispatch
from ade_tasks.runs.trigger_events import TriggerEvent
from ade_tasks.settings import Settings
from ade_tasks.states import RunStatus
from ade_tasks.testing import InMemorySender
from ade_tasks.triggers import registry as trigger_registry
from ade_tasks.triggers.health import LiveState, rule_health
from ade_tasks.triggers.matcher import Refusal
from ade_tasks.triggers.registry import TriggerKind, trigger_test
from ade_workers.actions import registry as action_registry
from ade_workers.actions.registry import ActionType
from ade_workers.engine.runner import execute_run
from ade_workers.engine.runner_config import RunnerConfig
from tests.unit.conftest import add_rule
from tests.unit.extensions.toys.action import SHOUT
from tests.unit.extensions.toys.guardrail import QUIET_HOURS
from tests.unit.extensions.toys.trigger_kind import BELL

RULE = """id: {id}
triggers: [{{type: bell.rung, bells: [big]}}, {{type: manual}}]
execution:
  kind: built-in
  actions: [{{id: greet, type: shout, text: "hello {{{{rule.id}}}}"}}]
guardrails: {guardrails}
"""


@pytest.fixture
def toys() -> Iterator[None]:
    """The three toys registered, one line each, and taken out again after the test."""
    action_registry.register(SHOUT)
    trigger_registry.register(BELL)
    guardrail_registry.register(QUIET_HOURS)
    yield
    guardrail_registry.unregister(QUIET_HOURS)
    trigger_registry.unregister(BELL)
    action_registry.unregister(SHOUT)


def rule_text(rule_id: str = "r", guardrails: str = "{}") -> str:
    return RULE.format(id=rule_id, guardrails=guardrails)


def a_rule(rule_id: str = "r", guardrails: str = "{}") -> Rule:
    parsed = parse_rule(load_yaml(rule_text(rule_id, guardrails)), "toy.yaml")
    assert isinstance(parsed, Rule), parsed
    return parsed


def quiet(start: datetime, end: datetime) -> str:
    """The toy guardrail's configuration: quiet from `start` to `end` (their times of day)."""
    return f'{{quiet_hours: {{start: "{start:%H:%M}", end: "{end:%H:%M}"}}}}'


@pytest.mark.usefixtures("toys")
def test_a_toy_action_and_trigger_validate_in_a_rule_and_say_what_is_wrong() -> None:
    rule = a_rule()
    assert rule.execution.actions[0].type == "shout"
    assert rule.triggers[0].type == "bell.rung"

    problems = parse_rule(
        {
            "id": "r",
            "triggers": [{"type": "bell.rung", "bells": []}],
            "execution": {"kind": "built-in", "actions": [{"type": "shout"}]},
        },
        "toy.yaml",
    )

    assert isinstance(problems, list)
    assert [problem.field for problem in problems] == [
        "triggers.0.bells",
        "execution.actions.0.text",
    ]


def test_without_registration_the_toys_are_unknown_with_the_known_kinds() -> None:
    problems = parse_rule(
        {
            "id": "r",
            "triggers": [{"type": "bell.rung", "bells": ["big"]}],
            "execution": {"kind": "built-in", "actions": [{"type": "shout", "text": "x"}]},
            "guardrails": {"quiet_hours": {"start": "22:00", "end": "06:00"}},
        },
        "toy.yaml",
    )

    assert isinstance(problems, list)
    reasons = " ".join(problem.reason for problem in problems)
    assert "unknown trigger type 'bell.rung'" in reasons
    assert "unknown action type 'shout' (available: run-command," in reasons
    assert "guardrails.quiet_hours" in [problem.field for problem in problems]


@pytest.mark.usefixtures("toys")
def test_unregistered_again_the_toys_are_unknown_and_the_built_ins_remain() -> None:
    guardrail_registry.unregister(QUIET_HOURS)
    trigger_registry.unregister(BELL)
    action_registry.unregister(SHOUT)

    assert "shout" not in steps.ACTION_MODELS and "shout" not in action_registry.EXECUTORS
    assert "bell.rung" not in triggers.known_trigger_types()
    assert set(action_registry.EXECUTORS) == set(steps.ACTION_MODELS)
    assert [g.name for g in guardrail_registry.GUARDRAILS] == [
        "time-limit",
        "rate-limit",
        "budget",
        "approval-gate",
    ]
    assert isinstance(parse_rule(load_yaml(rule_text()), "toy.yaml"), list)


class ShadowTrigger(TriggerDocument):
    """A second model answering to `manual`."""

    type: Literal["manual"]


def test_a_second_declaration_of_a_registered_name_is_refused() -> None:
    with pytest.raises(ValueError, match="action type 'run-command' has an executor already"):
        action_registry.register(ActionType(steps.RunCommandAction, SHOUT.executor))
    with pytest.raises(ValueError, match="trigger kind 'manual' is registered already"):
        trigger_registry.register(TriggerKind(ShadowTrigger, BELL.ready))
    with pytest.raises(ValueError, match="guardrail named 'budget' is registered already"):
        guardrail_registry.register(Budget())

    assert triggers.known_trigger_types() == {t.value for t in triggers.TriggerType}
    assert len(guardrail_registry.GUARDRAILS) == 4


@pytest.mark.usefixtures("toys")
def test_a_toy_action_runs_with_its_templated_field_rendered(
    session_factory: SessionFactory, rules_dir: Path, tmp_path: Path
) -> None:
    add_rule(session_factory, rules_dir, "r", rule_text())
    config = RunnerConfig(Settings(projects={"default": tmp_path}), action_registry.registry(), {})

    run = dispatch(session_factory, InMemorySender(), "r", TriggerEvent.manual()).run
    status = execute_run(session_factory, config, run.id, "w1")

    with session_factory() as session:
        recorded = run_steps_db.list_steps(session, run.id)
    assert status == RunStatus.SUCCEEDED
    assert [(step.step_id, step.output) for step in recorded] == [("greet", "HELLO R")]


@pytest.mark.usefixtures("toys")
def test_a_side_effect_free_toy_action_runs_before_the_approval_gate() -> None:
    document = load_yaml(rule_text())
    document["guardrails"] = {"require_human": True}
    document["execution"]["actions"].append({"type": "run-command", "command": "true"})
    rule = parse_rule(document, "toy.yaml")

    assert isinstance(rule, Rule)
    assert approval_gate(rule) == 1


@pytest.mark.usefixtures("toys")
def test_a_toy_trigger_matches_its_events_only() -> None:
    rule = a_rule()
    bell = rule.triggers[0]

    assert trigger_test("tower", "bell.rung", {"bell": "big"})(rule, bell) is None
    assert trigger_test("tower", "bell.rung", {"bell": "small"})(rule, bell) == Refusal(
        "bells", "bell small is not listed"
    )


@pytest.mark.usefixtures("toys")
def test_a_toy_trigger_reports_its_health() -> None:
    rule = a_rule()

    ready = rule_health(rule, LiveState(utcnow(), hooks=frozenset({"tower"})))
    unset = rule_health(rule, LiveState(utcnow()))

    assert ready.ready and ready.triggers[0].path == "the bell tower"
    assert not unset.ready
    assert unset.errors == [
        "triggers.0 (bell.rung): the bell tower is not configured: set ADE_HOOKS__tower"
    ]


@pytest.mark.usefixtures("toys")
def test_a_toy_guardrail_reads_its_own_configuration_and_says_what_is_wrong() -> None:
    rule = a_rule(guardrails='{quiet_hours: {start: "22:00", end: "06:00"}}')
    problems = parse_rule(
        load_yaml(rule_text(guardrails='{quiet_hours: {start: "22:00", end: "25:00"}}')), "t.yaml"
    )
    empty = parse_rule(
        load_yaml(rule_text(guardrails='{quiet_hours: {start: "22:00", end: "22:00"}}')), "t.yaml"
    )

    assert QUIET_HOURS.config(rule) == QUIET_HOURS.config_model.model_validate(
        {"start": "22:00", "end": "06:00"}
    )
    assert QUIET_HOURS.config(a_rule()) is None
    assert isinstance(problems, list) and [p.field for p in problems] == [
        "guardrails.quiet_hours.end"
    ]
    assert isinstance(empty, list) and [(p.field, p.reason) for p in empty] == [
        ("guardrails.quiet_hours", "start and end are both 22:00; give two times")
    ]


@pytest.mark.usefixtures("toys")
def test_a_toy_guardrail_refuses_and_admits_at_dispatch(
    session_factory: SessionFactory, rules_dir: Path
) -> None:
    now = utcnow()
    hour = timedelta(hours=1)
    add_rule(session_factory, rules_dir, "calm", rule_text("calm", quiet(now - hour, now + hour)))
    add_rule(
        session_factory, rules_dir, "loud", rule_text("loud", quiet(now + hour, now + 2 * hour))
    )
    sender = InMemorySender()

    refused = dispatch(session_factory, sender, "calm", TriggerEvent.manual()).run
    admitted = dispatch(session_factory, sender, "loud", TriggerEvent.manual()).run

    window = f"{now - hour:%H:%M}-{now + hour:%H:%M} UTC"
    assert refused.status == RunStatus.SKIPPED
    assert refused.error == f"skipped by quiet hours: rule 'calm' is quiet {window}"
    assert admitted.status == RunStatus.QUEUED


@pytest.mark.usefixtures("toys")
def test_a_toy_guardrail_reports_its_health() -> None:
    now = utcnow()
    hour = timedelta(hours=1)
    rule = a_rule(guardrails=quiet(now - hour, now + hour))
    hooks = frozenset({"tower"})

    held = rule_health(rule, LiveState(now, hooks=hooks))
    later = rule_health(rule, LiveState(now + 2 * hour, hooks=hooks))

    window = f"{now - hour:%H:%M}-{now + hour:%H:%M} UTC"
    assert not held.ready
    assert held.problems == (
        f"its quiet hours ({window}) hold its runs until {now + hour:%H:%M} UTC",
    )
    assert later.ready and not later.problems


def test_every_action_type_has_an_executor_and_templates_only_its_own_fields() -> None:
    # the built-in models are listed in the domain too, for rules validated without the workers
    assert set(action_registry.EXECUTORS) == set(steps.ACTION_MODELS)
    for model in steps.ACTION_MODELS.values():
        assert set(model.templated) <= set(model.model_fields), model


def test_every_trigger_model_is_declared_as_a_kind_once() -> None:
    declared = [kind.model for kind in trigger_registry.KINDS]

    assert sorted(declared, key=str) == sorted(triggers.TRIGGER_MODELS, key=str)
    assert triggers.known_trigger_types() == {t.value for t in triggers.TriggerType}


def test_the_guardrails_page_lists_every_registered_guardrail_as_held_by_the_registry() -> None:
    page = (Path(__file__).parents[3] / "docs" / "guardrails.md").read_text()
    table = page.split("## Where each guardrail is held", 1)[1].split("\n## ", 1)[0]
    rows = [line.split(" | ") for line in table.splitlines() if line.startswith("| `")]

    held_by_registry = {
        row[0].strip("| `"): tuple(row[1].replace("`", "").split(", "))
        for row in rows
        if row[2].startswith("the registry")
    }

    assert held_by_registry == {
        guardrail.name: guardrail.rule_fields for guardrail in guardrail_registry.GUARDRAILS
    }
