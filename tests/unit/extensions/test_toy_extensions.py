"""An extension is one module plus one registration line: a toy action type, a toy trigger kind
and a toy guardrail (`tests/unit/extensions/toys/`), each registered by one line below, validate in a rule,
run, and report health like the built-in ones; the registries they join are the only lists."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ade_tasks.clock import utcnow
from ade_tasks.db import run_steps as run_steps_db
from ade_tasks.db.engine import SessionFactory
from ade_tasks.guardrails import registry as guardrail_registry
from ade_tasks.guardrails.approval import approval_gate
from ade_tasks.limits import load_yaml
from ade_tasks.rules import steps, triggers
from ade_tasks.rules.loader import parse_rule
from ade_tasks.rules.rule import Rule, rebuild_rule_models
from ade_tasks.runs.dispatch import dispatch
from ade_tasks.runs.trigger_events import TriggerEvent
from ade_tasks.settings import Settings
from ade_tasks.states import RunStatus
from ade_tasks.testing import InMemorySender
from ade_tasks.triggers import registry as trigger_registry
from ade_tasks.triggers.health import LiveState, rule_health
from ade_tasks.triggers.matcher import Refusal
from ade_tasks.triggers.registry import trigger_test
from ade_workers.actions import registry as action_registry
from ade_workers.engine.runner import execute_run
from ade_workers.engine.runner_config import RunnerConfig
from tests.unit.conftest import add_rule
from tests.unit.extensions.toys.action import ShoutAction, shout
from tests.unit.extensions.toys.guardrail import QuietHours
from tests.unit.extensions.toys.trigger_kind import BELL

RULE = """id: {id}
description: "{description}"
triggers: [{{type: bell.rung, bells: [big]}}, {{type: manual}}]
execution:
  kind: built-in
  actions: [{{id: greet, type: shout, text: "hello {{{{rule.id}}}}"}}]
"""


@pytest.fixture
def toys(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The three toys registered, one line each (the action's model and executor live in two
    layers, the domain and the workers; so do the trigger's model and its kind)."""
    monkeypatch.setitem(steps.ACTION_MODELS, "shout", ShoutAction)
    monkeypatch.setitem(action_registry.EXECUTORS, "shout", shout)
    monkeypatch.setattr(triggers, "TRIGGER_MODELS", (*triggers.TRIGGER_MODELS, BELL.model))
    monkeypatch.setattr(trigger_registry, "KINDS", (*trigger_registry.KINDS, BELL))
    monkeypatch.setattr(
        guardrail_registry, "GUARDRAILS", (*guardrail_registry.GUARDRAILS, QuietHours())
    )
    rebuild_rule_models()
    yield
    monkeypatch.undo()
    rebuild_rule_models()


def a_rule(rule_id: str = "r", description: str = "") -> Rule:
    parsed = parse_rule(load_yaml(RULE.format(id=rule_id, description=description)), "toy.yaml")
    assert isinstance(parsed, Rule), parsed
    return parsed


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
        },
        "toy.yaml",
    )

    assert isinstance(problems, list)
    reasons = " ".join(problem.reason for problem in problems)
    assert "unknown trigger type 'bell.rung'" in reasons
    assert "unknown action type 'shout' (available: run-command," in reasons


@pytest.mark.usefixtures("toys")
def test_a_toy_action_runs_with_its_templated_field_rendered(
    session_factory: SessionFactory, rules_dir: Path, tmp_path: Path
) -> None:
    add_rule(session_factory, rules_dir, "r", RULE.format(id="r", description=""))
    config = RunnerConfig(Settings(projects={"default": tmp_path}), action_registry.registry(), {})

    run = dispatch(session_factory, InMemorySender(), "r", TriggerEvent.manual()).run
    status = execute_run(session_factory, config, run.id, "w1")

    with session_factory() as session:
        recorded = run_steps_db.list_steps(session, run.id)
    assert status == RunStatus.SUCCEEDED
    assert [(step.step_id, step.output) for step in recorded] == [("greet", "HELLO R")]


@pytest.mark.usefixtures("toys")
def test_a_side_effect_free_toy_action_runs_before_the_approval_gate() -> None:
    document = load_yaml(RULE.format(id="r", description=""))
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
def test_a_toy_guardrail_refuses_and_admits_at_dispatch(
    session_factory: SessionFactory, rules_dir: Path
) -> None:
    add_rule(session_factory, rules_dir, "calm", RULE.format(id="calm", description="quiet"))
    add_rule(session_factory, rules_dir, "loud", RULE.format(id="loud", description=""))
    sender = InMemorySender()

    refused = dispatch(session_factory, sender, "calm", TriggerEvent.manual()).run
    admitted = dispatch(session_factory, sender, "loud", TriggerEvent.manual()).run

    assert refused.status == RunStatus.SKIPPED
    assert refused.error == "skipped by quiet hours: rule 'calm' asks for quiet"
    assert admitted.status == RunStatus.QUEUED


def test_every_action_type_has_an_executor_and_templates_only_its_own_fields() -> None:
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

    held_by_registry = {row[0].strip("| `") for row in rows if row[2].startswith("the registry")}

    assert held_by_registry == {guardrail.name for guardrail in guardrail_registry.GUARDRAILS}
