"""Rules the engine cannot enforce on codex are refused at validation, naming the field and the
provider (never run and reported afterwards)."""

from __future__ import annotations

import pytest

from ade_tasks.errors import RuleProblem
from ade_tasks.limits import load_yaml
from ade_tasks.rules.loader import parse_rule
from ade_tasks.rules.models import Rule

RULE = """
id: codex-fix
triggers: [{{type: manual}}]
execution:
  kind: agent-session
  provider: codex
  model: gpt-5.5
  prompt: Fix the build.
  {extra}
"""


def admit(extra: str) -> Rule | list[RuleProblem]:
    return parse_rule(load_yaml(RULE.format(extra=extra)), "codex.yaml")


@pytest.mark.parametrize(
    ("extra", "why"),
    [
        ("permission_mode: edit", "its fallback deny applies to writes"),
        (
            "permission_mode: full-auto\n  policy: {fallback: allow, denied_tools: [edit_file]}",
            "policy.denied_tools names edit_file",
        ),
        (
            "permission_mode: edit\n  policy: {allowed_tools: ['*'], sandbox_root: src}",
            "policy.sandbox_root is set",
        ),
        ("permission_mode: edit\n  policy: {fallback: ask}", "its fallback ask applies"),
    ],
)
def test_a_policy_codex_cannot_enforce_is_refused_with_the_reason(extra: str, why: str) -> None:
    problems = admit(extra)

    assert isinstance(problems, list)
    (problem,) = problems
    assert problem.field == "execution"
    assert "cannot be enforced on provider codex in permission_mode" in problem.reason
    assert why in problem.reason
    assert "use provider claude-code" in problem.reason


def test_a_turn_limit_is_refused_on_codex() -> None:
    problems = admit("max_turns: 5")

    assert isinstance(problems, list)
    assert "max_turns cannot be enforced on provider codex" in problems[0].reason


@pytest.mark.parametrize(
    "extra",
    [
        "permission_mode: plan",
        "permission_mode: edit\n  policy: {allowed_tools: [write_file, edit_file]}",
        "permission_mode: full-auto\n  policy: {allowed_tools: ['*']}",
        "permission_mode: full-auto\n  policy: {fallback: allow, denied_tools: [bash]}",
    ],
)
def test_policies_codex_can_enforce_are_admitted(extra: str) -> None:
    assert isinstance(admit(extra), Rule)


def test_the_same_policy_is_admitted_for_claude_code() -> None:
    rule = parse_rule(
        load_yaml(RULE.format(extra="permission_mode: edit").replace("codex\n", "claude-code\n")),
        "c",
    )
    assert isinstance(rule, Rule)
