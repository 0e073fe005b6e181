"""A rule's `agent:` block: inherited by every agent session of the rule, merged field by field
(the session wins; policy allow and deny lists are unions), its own mistakes reported at
`agent.<field>`, and a stored rule reading back the same."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from ade_tasks.rules.agent_defaults import merge_session
from ade_tasks.rules.loader import parse_rule
from ade_tasks.rules.rule import Rule
from ade_tasks.rules.steps import AgentSessionStep

DEFAULTS: dict[str, Any] = {
    "provider": "anthropic",
    "model": "claude-sonnet-4-5",
    "permission_mode": "edit",
    "max_turns": 12,
    "policy": {"allowed_tools": ["read_file", "write_file"], "denied_tools": ["bash"]},
}


def chain(*steps: dict[str, Any], agent: Any = DEFAULTS) -> dict[str, Any]:
    actions = [{"type": "agent-session", "prompt": "do it", **step} for step in steps]
    return {
        "id": "agents",
        "triggers": [{"type": "manual"}],
        "agent": agent,
        "execution": {"kind": "built-in", "actions": actions},
    }


def sessions(document: dict[str, Any]) -> list[AgentSessionStep]:
    rule = parse_rule(document, "agents.yaml")
    assert isinstance(rule, Rule), [str(problem) for problem in rule]
    return [step for step in rule.execution.actions if isinstance(step, AgentSessionStep)]


def test_steps_that_restate_nothing_take_the_rules_agent_settings() -> None:
    (step,) = sessions(chain({"id": "fix"}))

    assert (step.provider, step.model, step.permission_mode, step.max_turns) == (
        "anthropic",
        "claude-sonnet-4-5",
        "edit",
        12,
    )
    assert (step.policy.allowed_tools, step.policy.denied_tools) == (
        ["read_file", "write_file"],
        ["bash"],
    )


def test_a_step_overrides_a_field_and_its_policy_extends_the_rules() -> None:
    policy = {"allowed_tools": ["grep"], "denied_tools": ["write_file"], "fallback": "ask"}
    plain, own = sessions(
        chain({"id": "a"}, {"id": "b", "model": "claude-opus-4", "policy": policy})
    )

    assert (plain.model, own.model, own.provider, own.permission_mode) == (
        "claude-sonnet-4-5",
        "claude-opus-4",
        "anthropic",
        "edit",
    )
    assert own.policy.allowed_tools == ["read_file", "write_file", "grep"]
    assert own.policy.denied_tools == ["bash", "write_file"]  # denials accumulate
    assert (own.policy.fallback, plain.policy.fallback) == ("ask", "deny")


def test_an_agent_session_execution_inherits_them_too() -> None:
    document = {
        "id": "solo",
        "triggers": [{"type": "manual"}],
        "agent": DEFAULTS,
        "execution": {"kind": "agent-session", "prompt": "review", "permission_mode": "plan"},
    }
    rule = parse_rule(document, "solo.yaml")
    assert isinstance(rule, Rule), [str(problem) for problem in rule]
    (session,) = rule.execution.actions
    assert (session.model, session.permission_mode, session.max_turns) == (
        "claude-sonnet-4-5",
        "plan",
        12,
    )


def test_a_stored_rule_reads_back_the_same() -> None:
    policy = {"allowed_tools": ["grep"], "denied_tools": ["write_file"]}
    rule = parse_rule(chain({"id": "a"}, {"id": "b", "policy": policy}), "agents.yaml")
    assert isinstance(rule, Rule)

    again = Rule.model_validate(rule.document())

    assert again.document() == rule.document()
    assert merge_session(merge_session({"policy": policy}, DEFAULTS), DEFAULTS) == merge_session(
        {"policy": policy}, DEFAULTS
    )


def test_a_bad_default_is_reported_where_it_was_written() -> None:
    problems = parse_rule(chain({"id": "a"}, agent={**DEFAULTS, "model": 5}), "agents.yaml")
    assert isinstance(problems, list)
    assert [(p.field, p.reason) for p in problems] == [("agent.model", "must be a string, not 5")]

    problems = parse_rule(chain({"id": "a"}, agent={**DEFAULTS, "prompt": "hi"}), "agents.yaml")
    assert isinstance(problems, list)
    assert [p.field for p in problems] == ["agent.prompt"]
    assert "states its own" in problems[0].reason

    problems = parse_rule(chain({"id": "a", "max_turns": 0}), "agents.yaml")
    assert isinstance(problems, list)
    assert [p.field for p in problems] == ["execution.actions.0.max_turns"]  # the step's own


def test_the_docs_example_validates_with_the_merge_it_describes() -> None:
    text = (Path(__file__).resolve().parents[4] / "docs" / "agents.md").read_text()
    (block,) = [b for b in re.findall(r"```yaml\n(.*?)```", text, re.S) if "# agent defaults" in b]

    fix, review = sessions(yaml.safe_load(block))

    assert (fix.model, fix.permission_mode, review.permission_mode) == (
        "claude-sonnet-4-5",
        "edit",
        "plan",
    )
    assert review.policy.denied_tools == ["bash", "edit_file"]
