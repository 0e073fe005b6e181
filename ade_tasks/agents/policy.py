"""Which tools an agent is told about and which calls the engine lets through.

The engine, never the model, decides, for every provider (the HTTP tool loop, Claude Code's
permission hooks, Codex's approvals), with one function: `decide`. A call is judged in a fixed
order, the first rule that speaks deciding:

0. the engine's hard limits, whatever the policy says: the engine's own data is never read or
   written and `.git` never written (`ProtectedPaths`); a path outside the worktree is refused;
   `plan` mode writes nothing and runs no command;
1. `denied_tools` match: deny (it also beats an operator's `accept_for_session`);
2. `todo` and `report` touch nothing: allow;
3. `allowed_tools` match: allow;
4. `sandbox_root` (set): a call naming paths is allowed when every path resolves (realpath,
   symlinks followed, relative to the worktree) inside the root, denied when one is outside; a
   call naming no path (`bash`) is left to the next rules, never judged by a working directory;
5. `edit` mode offers `bash` behind an approval: ask;
6. `edit` and `full-auto` with no `fallback` in the rule: a write to paths inside the worktree
   is allowed (what those modes are for, with either CLI); with a `fallback` the rule decides;
   likewise, in any mode, a tool of the `github` or `notify` palette the rule chose (its
   writes need `edit` and up: plan refuses them);
7. `fallback`: `allow`; `ask` (the literal read-only set and the GitHub reads run without
   asking, anything else parks the run on a pending input); `deny`.

Patterns are exact names or a prefix ending in `*`, compared case-insensitively; MCP tools are
`mcp:<server>:<tool>`, and Claude Code's spelling `mcp__server__tool` matches the same patterns.
Membership in `READ_ONLY_TOOLS` is by exact name, so `grep2` or `read_file_and_delete` are not
read-only. Modes: `plan` read-only; `edit` adds writes, and `bash` behind an approval;
`full-auto` adds `bash` judged by the policy alone. A tainted session narrows to read-only
tools and `report` before the policy applies (`narrow_for_taint`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

from ade_tasks.agents.protected import ProtectedPaths
from ade_tasks.rules.agent import ToolPalette, ToolPolicy
from ade_tasks.rules.tool_names import canonical_tool, matching_pattern

READ_ONLY_TOOLS = frozenset({"read_file", "list_dir", "glob", "grep"})
WRITE_TOOLS = frozenset({"write_file", "edit_file"})
COMMAND_TOOLS = frozenset({"bash"})
GITHUB_READ_TOOLS = frozenset({"github_pr", "github_threads", "github_checks"})
"""The `github` palette's reads: the run's pull request, its review threads, its checks."""
GITHUB_WRITE_TOOLS = frozenset(
    {
        "github_reply",
        "github_resolve",
        "github_comment",
        "github_rerun_checks",
        "github_push",
        "github_open_pr",
    }
)
"""The `github` palette's writes: they act on GitHub with the cluster's token (`edit` and up)."""
NOTIFY_TOOLS = frozenset({"notify"})
SERVICE_TOOLS = GITHUB_READ_TOOLS | GITHUB_WRITE_TOOLS | NOTIFY_TOOLS
"""Tools the engine runs against an outside service with its own credentials, never on paths:
choosing their palette lets them run unless the policy denies them or sets a `fallback`."""
ALWAYS_TOOLS = frozenset({"todo", "ask_user", "report"})
"""Available in every mode and palette: planning notes and the final structured report."""

PermissionMode = Literal["plan", "edit", "full-auto"]
Verdict = Literal["allow", "deny", "ask"]

PALETTE_TOOLS: dict[ToolPalette, tuple[str, ...]] = {
    "repo": ("read_file", "list_dir", "glob", "grep", "write_file", "edit_file"),
    # git and test commands run through bash; there is no separate git or test tool.
    "git": ("bash",),
    "tests": ("bash",),
    "github": (
        "github_pr",
        "github_threads",
        "github_checks",
        "github_reply",
        "github_resolve",
        "github_comment",
        "github_rerun_checks",
        "github_push",
        "github_open_pr",
    ),
    "notify": ("notify",),
}
"""The engine tools each palette brings."""

_OUTWARD = GITHUB_WRITE_TOOLS | NOTIFY_TOOLS
_PLAN = READ_ONLY_TOOLS | ALWAYS_TOOLS | GITHUB_READ_TOOLS
MODE_TOOLS: dict[PermissionMode, frozenset[str]] = {
    "plan": _PLAN,
    # edit offers bash, but each call not allowed by name waits for an operator (`decide`).
    "edit": _PLAN | WRITE_TOOLS | COMMAND_TOOLS | _OUTWARD,
    "full-auto": _PLAN | WRITE_TOOLS | COMMAND_TOOLS | _OUTWARD,
}
"""The tools each permission mode permits at most."""

TAINTED_TOOLS = READ_ONLY_TOOLS | GITHUB_READ_TOOLS | {"report"}
"""What a session whose prompt holds outsiders' text keeps."""

_ALWAYS_ORDER = ("todo", "ask_user", "report")
_VERDICTS: tuple[str, ...] = get_args(Verdict)
_MODES: tuple[str, ...] = get_args(PermissionMode)


@dataclass(frozen=True)
class Decision:
    """The engine's verdict on one tool call, and why."""

    verdict: Verdict
    reason: str


@dataclass(frozen=True)
class Policy:
    """A rule's tool policy, and the session's permission mode, as the engine enforces them.

    `mode` defaults to `edit`, the middle: writes as the policy says, `bash` behind an
    approval. Build it with the session's own mode (`Policy.from_rule(policy, mode)`).
    """

    allowed_tools: tuple[str, ...] = ()
    denied_tools: tuple[str, ...] = ()
    sandbox_root: str | None = None
    fallback: Verdict = "deny"
    mode: PermissionMode = "edit"
    worktree_writes: bool = False
    """Writes inside the worktree are allowed: an `edit` or `full-auto` rule set no fallback."""
    service_tools: bool = False
    """The service palettes' tools (`SERVICE_TOOLS`) run: the rule set no fallback."""

    def __post_init__(self) -> None:
        if self.fallback not in _VERDICTS:
            raise ValueError(
                f"policy fallback {self.fallback!r} is not one of {', '.join(_VERDICTS)}"
            )
        if self.mode not in _MODES:
            raise ValueError(f"permission mode {self.mode!r} is not one of {', '.join(_MODES)}")
        for field_name in ("allowed_tools", "denied_tools"):
            for pattern in getattr(self, field_name):
                problem = pattern_problem(pattern)
                if problem is not None:
                    raise ValueError(f"{field_name} pattern {pattern!r}: {problem}")
        if self.sandbox_root is not None and (
            not self.sandbox_root.strip() or "\x00" in self.sandbox_root
        ):
            raise ValueError(
                f"sandbox_root {self.sandbox_root!r} names no directory; give a path "
                "relative to the worktree, or leave it unset"
            )

    @classmethod
    def from_rule(cls, policy: ToolPolicy, mode: PermissionMode = "edit") -> Policy:
        """The enforced form of a rule's `ToolPolicy` in a session of `mode`."""
        return cls(
            allowed_tools=tuple(policy.allowed_tools),
            denied_tools=tuple(policy.denied_tools),
            sandbox_root=policy.sandbox_root,
            fallback=policy.fallback,
            mode=mode,
            worktree_writes=mode != "plan" and "fallback" not in policy.model_fields_set,
            service_tools="fallback" not in policy.model_fields_set,
        )


def pattern_problem(pattern: str) -> str | None:
    """Why `pattern` is not a tool pattern (an exact name, or a prefix ending in `*`)."""
    if not isinstance(pattern, str) or not pattern.strip():
        return "a tool pattern is a tool name, or a prefix ending in '*'; got an empty one"
    if "*" in pattern[:-1]:
        return "'*' may only end a pattern (a prefix); name tools exactly otherwise"
    return None


def exposed_tools(
    palette: Iterable[ToolPalette], mode: PermissionMode, policy: Policy
) -> list[str]:
    """The tools the model is told about: the palette's, within the mode, minus denied ones."""
    candidates = [tool for name in palette for tool in PALETTE_TOOLS[name]]
    candidates += _ALWAYS_ORDER
    permitted = MODE_TOOLS[mode]
    exposed: list[str] = []
    for tool in candidates:
        if tool in permitted and tool not in exposed:
            if matching_pattern(tool, policy.denied_tools) is None:
                exposed.append(tool)
    return exposed


def narrow_for_taint(tools: Iterable[str]) -> list[str]:
    """The tools a tainted session keeps: the read-only ones and `report`, in order."""
    return [tool for tool in tools if tool in TAINTED_TOOLS]


def decide(
    policy: Policy,
    tool: str,
    *,
    paths: Sequence[str] = (),
    writes: bool = False,
    worktree: Path,
    protected: ProtectedPaths | None = None,
) -> Decision:
    """Allow, deny or ask for one call of `tool` naming `paths` (writing them if `writes`).

    `tool` is an engine tool or a foreign one (a CLI's `WebFetch`, `mcp:server:tool`); `paths`
    are as the call gives them, absolute or relative to the worktree. `protected` defaults to
    the `.ade` and `.git` rules of the worktree alone; pass `ProtectedPaths.from_settings`.
    """
    if isinstance(paths, str):
        raise TypeError(f"paths must be a sequence of paths, not the string {paths!r}")
    real_worktree = os.path.realpath(worktree)
    guard = protected or ProtectedPaths(worktree=real_worktree)
    if guard.worktree != real_worktree:
        raise ValueError(
            f"the protected paths were built for {guard.worktree}, not for the worktree "
            f"{real_worktree}; build them with ProtectedPaths.from_settings(settings, worktree)"
        )
    writes = writes or tool in WRITE_TOOLS
    command = canonical_tool(tool) in COMMAND_TOOLS  # Claude Code's `Bash` is bash too
    for path in paths:
        refusal = _hard_limit(guard, path, writes)
        if refusal is not None:
            return Decision("deny", refusal)
    if policy.mode == "plan" and (writes or command):
        what = "writes" if writes else "runs commands"
        return Decision("deny", f"{tool} {what}; plan mode is read-only")
    if policy.mode == "plan" and tool in _OUTWARD:
        return Decision("deny", f"{tool} acts on an outside service; plan mode is read-only")
    denied = matching_pattern(tool, policy.denied_tools)
    if denied is not None:
        return Decision("deny", _listed(tool, denied, "denied_tools"))
    if tool in ALWAYS_TOOLS:  # the agent's own notes and final report touch nothing
        return Decision("allow", f"{tool} only records the agent's notes or report")
    allowed = matching_pattern(tool, policy.allowed_tools)
    if allowed is not None:
        return Decision("allow", _listed(tool, allowed, "allowed_tools"))
    if policy.sandbox_root is not None and paths:
        return _sandboxed(policy.sandbox_root, tool, paths, guard.worktree)
    if policy.mode == "edit" and command:
        return Decision("ask", f"edit mode runs {tool} only with an operator's approval")
    if writes and paths and not command and policy.worktree_writes:
        # Every path passed the hard limits: it is inside the worktree, and the mode writes.
        return Decision(
            "allow", f"{policy.mode} mode writes inside the worktree (no fallback set)"
        )
    if tool in SERVICE_TOOLS and policy.service_tools:
        return Decision("allow", f"{tool} is in the rule's tool_palette (no fallback set)")
    if policy.fallback == "allow":
        return Decision("allow", f"no rule denies {tool}; the policy's fallback is allow")
    if policy.fallback == "ask" and tool in READ_ONLY_TOOLS | GITHUB_READ_TOOLS:
        return Decision("allow", f"{tool} is read-only; the policy's fallback is ask")
    return Decision(
        policy.fallback, f"no rule allows {tool}; the policy's fallback is {policy.fallback}"
    )


def _hard_limit(guard: ProtectedPaths, path: str, writes: bool) -> str | None:
    """Why no policy can let a call touch `path`: engine data, git internals, outside."""
    if not path:
        return "the call names an empty path; give a path relative to the worktree"
    refusal = guard.refusal(path, writes=writes)
    if refusal is not None:
        return refusal
    real = os.path.realpath(os.path.join(guard.worktree, path))
    if not _contains(guard.worktree, real):
        return f"{path} resolves to {real}, outside the worktree; agents act inside it only"
    return None


def _listed(tool: str, pattern: str, field: str) -> str:
    if pattern == tool:
        return f"{tool} is in {field}"
    return f"{tool} matches {pattern!r} in {field}"


def _sandboxed(root_text: str, tool: str, paths: Sequence[str], worktree: str) -> Decision:
    """Allow when every path resolves inside `sandbox_root`, deny when one does not."""
    sandbox = os.path.realpath(os.path.join(worktree, root_text))
    if not _contains(worktree, sandbox):
        return Decision(
            "deny", f"sandbox_root {root_text} is outside the worktree; {tool} cannot run"
        )
    for path in paths:
        real = os.path.realpath(os.path.join(worktree, path))
        if not _contains(sandbox, real):
            shown = os.path.relpath(real, sandbox)
            return Decision("deny", f"{tool} outside sandbox_root {root_text}: {shown}")
    return Decision("allow", f"{tool} stays inside sandbox_root {root_text}")


def _contains(root: str, path: str) -> bool:
    return os.path.commonpath([root, path]) == root
