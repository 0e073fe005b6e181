"""Rules the engine cannot enforce on codex are refused at validation, naming the field and the
provider (never run and reported afterwards); what a session's sandbox and judge allow."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ade_tasks.agents.policy import Policy
from ade_tasks.agents.protected import ProtectedPaths
from ade_tasks.errors import RuleProblem
from ade_tasks.limits import load_yaml
from ade_tasks.rules.agent import AgentSession
from ade_tasks.rules.loader import parse_rule
from ade_tasks.rules.rule import Rule
from ade_tasks.secrets import Masker
from ade_workers.agents.cli.codex_requests import CodexRequest
from ade_workers.agents.cli.codex_session import CodexJudge, sandbox_for, unenforceable
from ade_workers.agents.cli.setup import CliSetup, Stop
from ade_workers.agents.http_session import NO_DECISIONS, SessionLimits

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
        ("permission_mode: edit\n  policy: {fallback: deny}", "its fallback deny applies to writes"),
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


def setup_for(tmp_path: Path, mode: str, tools: list[str], tainted: bool = False) -> CliSetup:
    worktree = tmp_path / "wt"
    worktree.mkdir(exist_ok=True)
    return CliSetup(
        binary="codex", worktree=worktree, env={}, limits=SessionLimits(1, None, 0.0),
        policy=Policy(fallback="allow", mode=mode),  # type: ignore[arg-type]
        tools=tools, tainted=tainted, decisions=NO_DECISIONS,
        protected=ProtectedPaths.for_worktree(worktree), provider=None, masker=Masker.none(),
        record=lambda *_: None,
    )  # fmt: skip


def session(mode: str) -> AgentSession:
    return AgentSession(provider="codex", model="m", prompt="p", permission_mode=mode)  # type: ignore[arg-type]


def test_codex_writes_only_when_mode_palette_and_taint_all_allow_it(tmp_path: Path) -> None:
    writes = ["read_file", "write_file", "edit_file", "bash"]
    assert sandbox_for(setup_for(tmp_path, "edit", writes), session("edit")) == "workspace-write"
    assert sandbox_for(setup_for(tmp_path, "plan", writes), session("plan")) == "read-only"
    assert sandbox_for(setup_for(tmp_path, "edit", ["bash"]), session("edit")) == "read-only"
    tainted = setup_for(tmp_path, "full-auto", writes, tainted=True)
    assert sandbox_for(tainted, session("full-auto")) == "read-only"


def test_a_writing_codex_session_never_starts_beside_nested_engine_data(tmp_path: Path) -> None:
    setup = setup_for(tmp_path, "edit", ["write_file", "edit_file"])
    (setup.worktree / "sub" / ".ade").mkdir(parents=True)

    problem = unenforceable(setup, session("edit"))

    assert problem is not None and "sub/.ade/" in problem


def test_codex_requests_for_more_than_the_sandbox_or_the_palette_are_declined(
    tmp_path: Path,
) -> None:
    judge = CodexJudge(setup_for(tmp_path, "full-auto", ["read_file", "write_file"]), Stop())

    def command(**params: Any) -> CodexRequest:
        return CodexRequest("command", "i1", "curl example.com", ("curl",), None, (), params)

    network = judge(command(networkApprovalContext={"host": "example.com"}))
    no_bash = judge(command())
    assert network.verdict == "deny" and "more than its sandbox" in network.reason
    assert no_bash.verdict == "deny" and "bash is not among" in no_bash.reason


@pytest.mark.parametrize("mode", ["plan", "edit", "full-auto"])
def test_a_codex_rule_with_no_policy_is_admitted_in_every_mode(mode: str) -> None:
    assert isinstance(admit(f"permission_mode: {mode}"), Rule)
