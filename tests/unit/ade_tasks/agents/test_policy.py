"""The engine decides which tools an agent sees and which calls run: the engine's hard limits,
then denied, allowed, sandbox, the mode's approval, fallback."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from ade_tasks.agents.policy import (
    PermissionMode,
    Policy,
    canonical_tool,
    decide,
    exposed_tools,
    narrow_for_taint,
)
from ade_tasks.agents.protected import ProtectedPaths
from ade_tasks.rules.agent import ToolPolicy
from ade_tasks.rules.rule import Rule
from ade_tasks.settings import Settings


@pytest.fixture
def worktree(tmp_path: Path) -> Path:
    root = tmp_path / "worktree"
    (root / "src").mkdir(parents=True)
    return root


def test_from_rule_carries_every_field_and_the_mode() -> None:
    rule_policy = ToolPolicy(
        allowed_tools=["grep"], denied_tools=["bash"], fallback="ask", sandbox_root="src/"
    )
    expected = Policy(("grep",), ("bash",), "src/", "ask", "plan")
    assert Policy.from_rule(rule_policy, "plan") == expected


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"fallback": "maybe"}, "policy fallback 'maybe' is not one of allow, deny, ask"),
        ({"mode": "yolo"}, "permission mode 'yolo' is not one of plan, edit, full-auto"),
        ({"allowed_tools": ("re*d",)}, "allowed_tools pattern 're*d': '*' may only end"),
        ({"denied_tools": ("",)}, "denied_tools pattern '': a tool pattern is a tool name"),
        ({"sandbox_root": " "}, "sandbox_root ' ' names no directory"),
    ],
)
def test_a_bad_policy_is_refused_with_what_is_wrong(kwargs: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match="^" + message.replace("*", r"\*")):
        Policy(**kwargs)  # type: ignore[arg-type]


def test_paths_given_as_one_string_are_a_clear_error(worktree: Path) -> None:
    with pytest.raises(TypeError, match="paths must be a sequence of paths, not the string"):
        decide(Policy(), "read_file", paths="README", worktree=worktree)


# --- denied > allowed > sandbox > fallback ----------------------------------------------------


def test_denied_beats_allowed(worktree: Path) -> None:
    policy = Policy(allowed_tools=("bash",), denied_tools=("bash",), fallback="allow")
    decision = decide(policy, "bash", worktree=worktree)
    assert (decision.verdict, decision.reason) == ("deny", "bash is in denied_tools")


def test_denied_beats_the_always_tools(worktree: Path) -> None:
    assert decide(Policy(denied_tools=("todo",)), "todo", worktree=worktree).verdict == "deny"
    assert decide(Policy(), "report", worktree=worktree).verdict == "allow"


def test_allowed_beats_the_sandbox(worktree: Path) -> None:
    # Given write_file allowed by name and a sandbox of src/
    policy = Policy(allowed_tools=("write_file",), sandbox_root="src/")
    # When it writes outside src/
    decision = decide(policy, "write_file", paths=["README"], writes=True, worktree=worktree)
    # Then allowed_tools decides
    assert (decision.verdict, decision.reason) == ("allow", "write_file is in allowed_tools")


def test_the_sandbox_allows_paths_inside_and_denies_paths_outside(worktree: Path) -> None:
    policy = Policy(sandbox_root="src", fallback="deny")
    inside = decide(policy, "edit_file", paths=["src/a.py"], writes=True, worktree=worktree)
    outside = decide(policy, "edit_file", paths=["README"], writes=True, worktree=worktree)
    read_outside = decide(policy, "read_file", paths=["README"], worktree=worktree)
    assert (inside.verdict, inside.reason) == ("allow", "edit_file stays inside sandbox_root src")
    assert (outside.verdict, outside.reason) == (
        "deny",
        "edit_file outside sandbox_root src: ../README",
    )
    assert read_outside.verdict == "deny"  # reads are judged by the sandbox too


def test_every_path_of_a_call_must_be_inside_the_sandbox(worktree: Path) -> None:
    policy = Policy(sandbox_root="src")
    decision = decide(policy, "Read", paths=["src/a", "b"], worktree=worktree)
    assert decision.verdict == "deny"


def test_the_sandbox_beats_the_fallback(worktree: Path) -> None:
    policy = Policy(sandbox_root="src", fallback="allow")
    decision = decide(policy, "write_file", paths=["README"], worktree=worktree)
    assert decision.verdict == "deny"


def test_a_call_without_a_path_is_left_to_the_fallback_not_the_sandbox(worktree: Path) -> None:
    # Given a sandbox, and bash naming no path
    policy = Policy(sandbox_root="src", fallback="allow", mode="full-auto")
    # Then the fallback decides, never the session's working directory
    decision = decide(policy, "bash", worktree=worktree)
    assert decision.verdict == "allow"
    assert decision.reason == "no rule denies bash; the policy's fallback is allow"


def test_sandbox_sibling_sharing_the_prefix_is_outside(worktree: Path) -> None:
    (worktree / "src2").mkdir()
    policy = Policy(sandbox_root="src")
    assert decide(policy, "write_file", paths=["src2/a"], worktree=worktree).verdict == "deny"


def test_symlink_out_of_sandbox_is_outside(worktree: Path) -> None:
    (worktree / "docs").mkdir()
    (worktree / "src" / "out").symlink_to(worktree / "docs")
    policy = Policy(sandbox_root="src")
    assert decide(policy, "write_file", paths=["src/out/a"], worktree=worktree).verdict == "deny"


def test_sandbox_root_outside_the_worktree_denies_every_path(worktree: Path) -> None:
    policy = Policy(sandbox_root="../", fallback="allow")
    decision = decide(policy, "write_file", paths=["a"], worktree=worktree)
    assert decision.verdict == "deny"
    assert "sandbox_root ../ is outside the worktree" in decision.reason


# --- the engine's hard limits -----------------------------------------------------------------


@pytest.mark.parametrize("path", ["../x", "/etc/passwd", "src/../../x"])
def test_a_path_outside_the_worktree_is_denied_whatever_the_policy(
    worktree: Path, path: str
) -> None:
    policy = Policy(allowed_tools=("*",), fallback="allow", mode="full-auto")
    decision = decide(policy, "read_file", paths=[path], worktree=worktree)
    assert decision.verdict == "deny"
    assert "outside the worktree" in decision.reason


def test_an_empty_path_is_denied_with_advice(worktree: Path) -> None:
    decision = decide(Policy(fallback="allow"), "Read", paths=[""], worktree=worktree)
    assert decision == decision.__class__(
        "deny", "the call names an empty path; give a path relative to the worktree"
    )


@pytest.mark.parametrize("path", [".ade/api-token", ".ade", "sub/.ade/ade.db", ".ADE/api-token"])
def test_engine_data_in_the_worktree_is_never_read(worktree: Path, path: str) -> None:
    policy = Policy(allowed_tools=("*",), fallback="allow", mode="full-auto")
    decision = decide(policy, "read_file", paths=[path], worktree=worktree)
    assert decision.verdict == "deny"
    assert decision.reason == (
        f"{path} is the engine's own data (a .ade data directory); agents never read or write it"
    )


def test_a_symlink_to_engine_data_is_denied(worktree: Path) -> None:
    (worktree / ".ade").mkdir()
    (worktree / ".ade" / "api-token").write_text("t\n")
    (worktree / "innocent").symlink_to(worktree / ".ade" / "api-token")
    decision = decide(Policy(fallback="allow"), "Read", paths=["innocent"], worktree=worktree)
    assert decision.verdict == "deny" and "engine's own data" in decision.reason


def test_git_internals_are_readable_but_never_writable(worktree: Path) -> None:
    policy = Policy(allowed_tools=("*",), fallback="allow", mode="full-auto")
    read = decide(policy, "read_file", paths=[".git/config"], worktree=worktree)
    write = decide(policy, "Write", paths=[".git/hooks/pre-commit"], writes=True, worktree=worktree)
    nested = decide(policy, "edit_file", paths=["vendor/lib/.git/config"], worktree=worktree)
    assert read.verdict == "allow"
    assert (write.verdict, write.reason) == (
        "deny",
        ".git/hooks/pre-commit is inside .git; agents never write git internals",
    )
    assert nested.verdict == "deny"


def test_settings_protect_the_data_dir_and_database_wherever_they_are(
    tmp_path: Path, worktree: Path
) -> None:
    # Given a data dir and a SQLite database inside the worktree under other names
    settings = Settings(
        data_dir=worktree / "state", database_url=f"sqlite:///{worktree / 'db' / 'ade.sqlite'}"
    )
    protected = ProtectedPaths.from_settings(settings, worktree)
    policy = Policy(allowed_tools=("*",), fallback="allow", mode="full-auto")

    def verdict(path: str) -> str:
        return decide(
            policy, "read_file", paths=[path], worktree=worktree, protected=protected
        ).reason

    # Then each is the engine's own data, named as such
    assert verdict("state/api-token").startswith(
        f"state/api-token is the engine's own data (the data directory {worktree / 'state'})"
    )
    assert "the SQLite database" in verdict("db/ade.sqlite-wal")
    assert verdict("db/other.txt") == "read_file matches '*' in allowed_tools"


def test_a_lane_inside_the_data_dir_is_the_agents_but_the_rest_is_not(tmp_path: Path) -> None:
    # Given the default layout: the worktree is a lane under <data dir>/lanes
    data = tmp_path / ".ade"
    lane = data / "lanes" / "default" / "fix"
    lane.mkdir(parents=True)
    (data / "api-token").write_text("tok\n")
    protected = ProtectedPaths.from_settings(Settings(data_dir=data), lane)
    policy = Policy(allowed_tools=("*",))

    def verdict(path: str) -> str:
        return decide(policy, "read_file", paths=[path], worktree=lane, protected=protected).verdict

    assert verdict("src/app.py") == "allow"
    assert verdict(str(data / "api-token")) == "deny"
    assert verdict(str(data / "lanes" / "default" / "other" / "x")) == "deny"


def test_plan_mode_writes_nothing_and_runs_no_command(worktree: Path) -> None:
    policy = Policy(allowed_tools=("*",), fallback="allow", mode="plan")
    write = decide(policy, "Write", paths=["a"], writes=True, worktree=worktree)
    bash = decide(policy, "Bash", worktree=worktree)
    read = decide(policy, "read_file", paths=["a"], worktree=worktree)
    assert (write.verdict, write.reason) == ("deny", "Write writes; plan mode is read-only")
    assert (bash.verdict, bash.reason) == ("deny", "Bash runs commands; plan mode is read-only")
    assert read.verdict == "allow"


# --- modes and fallback -----------------------------------------------------------------------


@pytest.mark.parametrize("fallback", ["allow", "deny", "ask"])
def test_edit_mode_asks_before_bash_unless_allowed_or_denied(worktree: Path, fallback: str) -> None:
    asked = decide(Policy(fallback=fallback, mode="edit"), "bash", worktree=worktree)  # type: ignore[arg-type]
    allowed = decide(Policy(allowed_tools=("bash",), mode="edit"), "bash", worktree=worktree)
    denied = decide(
        Policy(denied_tools=("bash",), fallback="allow", mode="edit"), "bash", worktree=worktree
    )
    assert (asked.verdict, asked.reason) == (
        "ask",
        "edit mode runs bash only with an operator's approval",
    )
    assert (allowed.verdict, denied.verdict) == ("allow", "deny")


def test_full_auto_leaves_bash_to_the_policy(worktree: Path) -> None:
    allow = decide(Policy(fallback="allow", mode="full-auto"), "bash", worktree=worktree)
    deny = decide(Policy(fallback="deny", mode="full-auto"), "bash", worktree=worktree)
    assert (allow.verdict, deny.verdict) == ("allow", "deny")


@pytest.mark.parametrize("tool", ["read_file", "list_dir", "glob", "grep"])
def test_ask_lets_read_only_tools_through(worktree: Path, tool: str) -> None:
    decision = decide(Policy(fallback="ask"), tool, paths=["src"], worktree=worktree)
    assert decision.verdict == "allow"


@pytest.mark.parametrize("tool", ["read_file_and_delete", "grep2", "xgrep", "Read", "edit_file"])
def test_ask_asks_for_anything_not_literally_read_only(worktree: Path, tool: str) -> None:
    decision = decide(Policy(fallback="ask"), tool, worktree=worktree)
    assert decision.verdict == "ask"
    assert decision.reason == f"no rule allows {tool}; the policy's fallback is ask"


@pytest.mark.parametrize("tool", ["read_file", "edit_file", "mcp_thing"])
def test_deny_blocks_every_unmatched_tool(worktree: Path, tool: str) -> None:
    decision = decide(Policy(fallback="deny"), tool, worktree=worktree)
    assert decision.verdict == "deny"
    assert decision.reason == f"no rule allows {tool}; the policy's fallback is deny"


def test_allow_fallback_allows_unmatched_tools(worktree: Path) -> None:
    assert decide(Policy(fallback="allow"), "WebFetch", worktree=worktree).verdict == "allow"


# --- patterns ---------------------------------------------------------------------------------


def test_trailing_star_is_a_prefix_pattern(worktree: Path) -> None:
    policy = Policy(allowed_tools=("read_*",), denied_tools=("write_*",))
    allowed = decide(policy, "read_file", worktree=worktree)
    denied = decide(policy, "write_file", paths=["x"], worktree=worktree)
    assert allowed.verdict == "allow"
    assert (denied.verdict, denied.reason) == (
        "deny",
        "write_file matches 'write_*' in denied_tools",
    )


def test_a_pattern_without_a_star_names_one_tool(worktree: Path) -> None:
    assert decide(Policy(allowed_tools=("read",)), "read_file", worktree=worktree).verdict == "deny"


def test_patterns_are_case_insensitive(worktree: Path) -> None:
    policy = Policy(allowed_tools=("webfetch",), denied_tools=("BASH",), fallback="allow")
    assert decide(policy, "WebFetch", worktree=worktree).reason == (
        "WebFetch matches 'webfetch' in allowed_tools"
    )
    assert decide(policy, "bash", worktree=worktree).verdict == "deny"


@pytest.mark.parametrize(
    ("pattern", "tool"),
    [
        ("mcp:github:create_issue", "mcp__github__create_issue"),
        ("mcp:github:*", "mcp__github__create_issue"),
        ("mcp__github__*", "mcp:github:create_issue"),
        ("mcp:*", "mcp__slack__post"),
        ("MCP:GitHub:Create_Issue", "mcp:github:create_issue"),
    ],
)
def test_mcp_tools_match_in_either_spelling(worktree: Path, pattern: str, tool: str) -> None:
    decision = decide(Policy(allowed_tools=(pattern,)), tool, worktree=worktree)
    assert decision.verdict == "allow"


def test_an_mcp_pattern_does_not_match_another_server(worktree: Path) -> None:
    policy = Policy(allowed_tools=("mcp:github:*",))
    assert decide(policy, "mcp__githubx__tool", worktree=worktree).verdict == "deny"


def test_canonical_tool_names() -> None:
    assert canonical_tool("mcp__my_server__do__it") == "mcp:my_server:do__it"
    assert canonical_tool("Read") == "read"


# --- what the model is told about -------------------------------------------------------------

REPO_READ = ["read_file", "list_dir", "glob", "grep"]


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("plan", [*REPO_READ, "todo", "ask_user", "report"]),
        ("edit", [*REPO_READ, "write_file", "edit_file", "bash", "todo", "ask_user", "report"]),
        (
            "full-auto",
            [*REPO_READ, "write_file", "edit_file", "bash", "todo", "ask_user", "report"],
        ),
    ],
)
def test_exposed_tools_per_mode(mode: PermissionMode, expected: list[str]) -> None:
    assert exposed_tools(["repo", "git", "tests"], mode, Policy()) == expected


def test_exposed_tools_per_palette() -> None:
    always = ["todo", "ask_user", "report"]
    assert exposed_tools(["git"], "full-auto", Policy()) == ["bash", *always]
    assert exposed_tools([], "plan", Policy()) == always


GITHUB_READS = ["github_pr", "github_threads", "github_checks"]
GITHUB_WRITES = [
    "github_reply",
    "github_resolve",
    "github_comment",
    "github_rerun_checks",
    "github_push",
    "github_open_pr",
]


def test_the_github_and_notify_palettes_bring_tools_reads_in_plan_writes_from_edit() -> None:
    # Issue 36, finding 2: these palettes used to be accepted and bring nothing.
    always = ["todo", "ask_user", "report"]
    assert exposed_tools(["github", "notify"], "plan", Policy()) == [*GITHUB_READS, *always]
    for mode in ("edit", "full-auto"):
        tools = exposed_tools(["github", "notify"], mode, Policy(mode=mode))
        assert tools == [*GITHUB_READS, *GITHUB_WRITES, "notify", *always]


def test_a_tainted_session_keeps_only_the_github_reads() -> None:
    tools = exposed_tools(["repo", "github", "notify"], "full-auto", Policy(mode="full-auto"))
    assert narrow_for_taint(tools) == [*REPO_READ, *GITHUB_READS, "report"]


def test_the_palette_lets_github_tools_run_unless_the_rule_decides(tmp_path: Path) -> None:
    edit = Policy.from_rule(ToolPolicy(), "edit")
    plan = Policy.from_rule(ToolPolicy(), "plan")
    strict = Policy.from_rule(ToolPolicy(fallback="deny"), "edit")
    asking = Policy.from_rule(ToolPolicy(fallback="ask"), "edit")
    denied = Policy.from_rule(ToolPolicy(denied_tools=["github_push"]), "edit")
    assert decide(edit, "github_push", worktree=tmp_path).verdict == "allow"
    assert decide(plan, "github_pr", worktree=tmp_path).verdict == "allow"
    assert decide(plan, "github_comment", worktree=tmp_path).verdict == "deny"
    assert decide(plan, "notify", worktree=tmp_path).verdict == "deny"
    assert decide(strict, "github_comment", worktree=tmp_path).verdict == "deny"
    assert decide(asking, "github_pr", worktree=tmp_path).verdict == "allow"
    assert decide(asking, "github_comment", worktree=tmp_path).verdict == "ask"
    assert decide(denied, "github_push", worktree=tmp_path).verdict == "deny"


def test_exposed_tools_drop_denied_tools() -> None:
    policy = Policy(denied_tools=("bash", "write_*"))
    exposed = exposed_tools(["repo", "tests"], "full-auto", policy)
    assert exposed == [*REPO_READ, "edit_file", "todo", "ask_user", "report"]


def test_a_tainted_session_keeps_read_only_tools_and_report() -> None:
    tools = [*REPO_READ, "write_file", "bash", "todo", "report"]
    assert narrow_for_taint(tools) == [*REPO_READ, "report"]


def test_protected_paths_of_another_worktree_are_a_clear_error(
    worktree: Path, tmp_path: Path
) -> None:
    other = ProtectedPaths.for_worktree(tmp_path)
    with pytest.raises(ValueError, match=r"built for .*, not for the worktree"):
        decide(Policy(), "read_file", worktree=worktree, protected=other)


@pytest.mark.parametrize("mode", ["edit", "full-auto"])
def test_a_writing_mode_with_no_fallback_writes_inside_the_worktree(worktree: Path, mode) -> None:
    policy = Policy.from_rule(ToolPolicy(), mode)
    assert decide(policy, "write_file", paths=["src/fix.py"], worktree=worktree).verdict == "allow"
    assert decide(policy, "edit_file", paths=["/etc/passwd"], worktree=worktree).verdict == "deny"
    assert decide(policy, "write_file", paths=[".git/config"], worktree=worktree).verdict == "deny"


def test_plan_and_an_explicit_fallback_still_decide_writes(worktree: Path) -> None:
    plan = Policy.from_rule(ToolPolicy(), "plan")
    assert decide(plan, "write_file", paths=["a.py"], worktree=worktree).verdict == "deny"
    for fallback in ("deny", "ask"):
        explicit = Policy.from_rule(ToolPolicy(fallback=fallback), "edit")  # type: ignore[arg-type]
        verdict = decide(explicit, "write_file", paths=["a.py"], worktree=worktree).verdict
        assert verdict == fallback
    denied = Policy.from_rule(ToolPolicy(denied_tools=["write_file"]), "edit")
    assert decide(denied, "write_file", paths=["a.py"], worktree=worktree).verdict == "deny"


def test_no_policy_lets_an_agent_change_the_engines_own_code() -> None:
    # The `make dev` default project is the engine's checkout: its code is readable, never
    # writable, so no edit_file can change what the engine runs (its hook, its policy).
    checkout = Path(__file__).resolve().parents[4]
    guard = ProtectedPaths.from_settings(Settings(), checkout)
    hook = "ade_workers/agents/cli/claude_hook.py"
    policy = Policy.from_rule(ToolPolicy(allowed_tools=["*"]), "full-auto")
    refused = decide(policy, "edit_file", paths=[hook], worktree=checkout, protected=guard)
    assert refused.verdict == "deny" and "the engine's own code" in refused.reason
    assert (
        decide(policy, "read_file", paths=[hook], worktree=checkout, protected=guard).verdict
        == "allow"
    )
    assert guard.refusal("README.md", writes=True) is None


@pytest.mark.parametrize("policy", ["{allowed_tools: [bash]}", None], ids=["some", "none"])
def test_a_stored_rule_keeps_its_unstated_fallback_unstated(worktree: Path, policy: str) -> None:
    """A worker reads the stored document (`Rule.document()`), not the YAML: a fallback the
    author left out must stay out, or an edit session loses its worktree writes and the
    github palette ("no rule allows github_checks; the policy's fallback is deny")."""
    document = yaml.safe_load(f"""
id: fix
triggers: [{{type: manual}}]
execution:
  kind: agent-session
  provider: anthropic
  model: m
  permission_mode: edit
  tool_palette: [repo, github]
  prompt: go
  {f"policy: {policy}" if policy else ""}
""")
    stored = Rule.model_validate(Rule.model_validate(document).document())

    enforced = Policy.from_rule(stored.execution.policy, "edit")  # type: ignore[union-attr]

    assert enforced.service_tools and enforced.worktree_writes
    assert decide(enforced, "github_checks", worktree=worktree).verdict == "allow"
    wrote = decide(enforced, "write_file", paths=["src/a.py"], writes=True, worktree=worktree)
    assert wrote.verdict == "allow"
