"""The engine decides which tools an agent sees and which calls run: deny, sandbox, allow, fallback."""

from __future__ import annotations

from pathlib import Path

import pytest

from ade_tasks.agents.policy import PermissionMode, Policy, decide, exposed_tools
from ade_tasks.rules.models import ToolPolicy


@pytest.fixture
def worktree(tmp_path: Path) -> Path:
    (tmp_path / "src").mkdir()
    return tmp_path


def test_from_rule_carries_every_field() -> None:
    rule_policy = ToolPolicy(
        allowed_tools=["grep"], denied_tools=["bash"], fallback="ask", sandbox_root="src/"
    )
    assert Policy.from_rule(rule_policy) == Policy(("grep",), ("bash",), "src/", "ask")


def test_denied_beats_allowed(worktree: Path) -> None:
    policy = Policy(allowed_tools=("bash",), denied_tools=("bash",), fallback="allow")
    decision = decide(policy, "bash", writes_or_runs_in=None, worktree=worktree)
    assert decision.verdict == "deny"
    assert decision.reason == "bash is in denied_tools"


def test_trailing_star_is_a_prefix_pattern(worktree: Path) -> None:
    policy = Policy(allowed_tools=("read_*",), denied_tools=("write_*",), fallback="deny")
    allowed = decide(policy, "read_file", writes_or_runs_in=None, worktree=worktree)
    denied = decide(policy, "write_file", writes_or_runs_in=Path("x"), worktree=worktree)
    assert allowed.verdict == "allow"
    assert denied.verdict == "deny"
    assert denied.reason == "write_file matches 'write_*' in denied_tools"


def test_star_only_trailing_is_a_pattern(worktree: Path) -> None:
    # Given a pattern without a trailing star: exact names only
    policy = Policy(allowed_tools=("read",), fallback="deny")
    assert decide(policy, "read_file", writes_or_runs_in=None, worktree=worktree).verdict == "deny"


def test_allowed_write_outside_sandbox_is_denied(worktree: Path) -> None:
    policy = Policy(allowed_tools=("write_file",), sandbox_root="src/", fallback="allow")
    decision = decide(policy, "write_file", writes_or_runs_in=Path("x"), worktree=worktree)
    assert decision.verdict == "deny"
    assert decision.reason == "write_file outside sandbox_root src/: ../x"


def test_allowed_write_inside_sandbox_is_allowed(worktree: Path) -> None:
    policy = Policy(allowed_tools=("write_file",), sandbox_root="src/")
    decision = decide(policy, "write_file", writes_or_runs_in=Path("src/a.py"), worktree=worktree)
    assert decision.verdict == "allow"
    assert decision.reason == "write_file is in allowed_tools"


def test_bash_running_outside_sandbox_is_denied(worktree: Path) -> None:
    policy = Policy(allowed_tools=("bash",), sandbox_root="src")
    # Given bash running in the worktree root (outside src/), then in src/
    outside = decide(policy, "bash", writes_or_runs_in=worktree, worktree=worktree)
    inside = decide(policy, "bash", writes_or_runs_in=worktree / "src", worktree=worktree)
    assert outside.verdict == "deny"
    assert "outside sandbox_root src" in outside.reason
    assert inside.verdict == "allow"


def test_default_sandbox_is_the_worktree(worktree: Path) -> None:
    policy = Policy(allowed_tools=("write_file", "bash"))
    escape = decide(policy, "write_file", writes_or_runs_in=Path("../x"), worktree=worktree)
    absolute = decide(policy, "bash", writes_or_runs_in=Path("/tmp"), worktree=worktree)
    assert escape.verdict == "deny" and "outside the worktree" in escape.reason
    assert absolute.verdict == "deny"


def test_sandbox_sibling_sharing_the_prefix_is_outside(worktree: Path) -> None:
    (worktree / "src2").mkdir()
    policy = Policy(allowed_tools=("write_file",), sandbox_root="src")
    decision = decide(policy, "write_file", writes_or_runs_in=Path("src2/a"), worktree=worktree)
    assert decision.verdict == "deny"


def test_symlink_out_of_sandbox_is_outside(
    worktree: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    (worktree / "src" / "out").symlink_to(tmp_path_factory.mktemp("elsewhere"))
    policy = Policy(allowed_tools=("write_file",), sandbox_root="src")
    decision = decide(policy, "write_file", writes_or_runs_in=Path("src/out/a"), worktree=worktree)
    assert decision.verdict == "deny"


def test_sandbox_root_outside_the_worktree_denies_writes(worktree: Path) -> None:
    policy = Policy(allowed_tools=("write_file",), sandbox_root="../")
    decision = decide(policy, "write_file", writes_or_runs_in=Path("a"), worktree=worktree)
    assert decision.verdict == "deny"
    assert "sandbox_root ../ is outside the worktree" in decision.reason


def test_reads_ignore_the_sandbox(worktree: Path) -> None:
    policy = Policy(allowed_tools=("read_file",), sandbox_root="src")
    assert decide(policy, "read_file", writes_or_runs_in=None, worktree=worktree).verdict == "allow"


@pytest.mark.parametrize("tool", ["read_file", "list_dir", "glob", "grep"])
def test_ask_lets_read_only_tools_through(worktree: Path, tool: str) -> None:
    decision = decide(Policy(fallback="ask"), tool, writes_or_runs_in=None, worktree=worktree)
    assert decision.verdict == "allow"


@pytest.mark.parametrize("tool", ["read_file_and_delete", "grep2", "xgrep", "edit_file", "bash"])
def test_ask_asks_for_anything_not_literally_read_only(worktree: Path, tool: str) -> None:
    decision = decide(Policy(fallback="ask"), tool, writes_or_runs_in=None, worktree=worktree)
    assert decision.verdict == "ask"
    assert decision.reason == f"no rule allows {tool}; the policy's fallback is ask"


@pytest.mark.parametrize("tool", ["read_file", "edit_file", "mcp_thing"])
def test_deny_blocks_every_unmatched_tool(worktree: Path, tool: str) -> None:
    decision = decide(Policy(fallback="deny"), tool, writes_or_runs_in=None, worktree=worktree)
    assert decision.verdict == "deny"
    assert decision.reason == f"no rule allows {tool}; the policy's fallback is deny"


def test_allow_fallback_allows_unmatched_tools(worktree: Path) -> None:
    decision = decide(
        Policy(fallback="allow"), "mcp_thing", writes_or_runs_in=None, worktree=worktree
    )
    assert decision.verdict == "allow"


def test_fallback_allow_still_respects_the_sandbox(worktree: Path) -> None:
    policy = Policy(fallback="allow", sandbox_root="src")
    decision = decide(policy, "edit_file", writes_or_runs_in=Path("README"), worktree=worktree)
    assert decision.verdict == "deny"


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("plan", ["read_file", "list_dir", "glob", "grep", "todo", "report"]),
        (
            "edit",
            ["read_file", "list_dir", "glob", "grep", "write_file", "edit_file", "todo", "report"],
        ),
        (
            "full-auto",
            [
                "read_file",
                "list_dir",
                "glob",
                "grep",
                "write_file",
                "edit_file",
                "bash",
                "todo",
                "report",
            ],
        ),
    ],
)
def test_exposed_tools_per_mode(mode: PermissionMode, expected: list[str]) -> None:
    assert exposed_tools(["repo", "git", "tests"], mode, Policy()) == expected


def test_exposed_tools_per_palette() -> None:
    assert exposed_tools(["git"], "full-auto", Policy()) == ["bash", "todo", "report"]
    assert exposed_tools(["github", "notify"], "full-auto", Policy()) == ["todo", "report"]
    assert exposed_tools([], "plan", Policy()) == ["todo", "report"]


def test_exposed_tools_drop_denied_tools() -> None:
    policy = Policy(denied_tools=("bash", "write_*"))
    exposed = exposed_tools(["repo", "tests"], "full-auto", policy)
    assert exposed == ["read_file", "list_dir", "glob", "grep", "edit_file", "todo", "report"]
