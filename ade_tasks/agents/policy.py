"""Which tools an agent is told about and which calls the engine lets through.

The engine, never the model, decides. A call is judged in a fixed order: `denied_tools` first
(deny), then the sandbox (a write or a command outside `sandbox_root` is denied, whatever else
allows it), then `allowed_tools` (allow), then the policy's `fallback`. Under `ask`, read-only
tools run without asking; membership in `READ_ONLY_TOOLS` is by exact name, so `grep2` or
`read_file_and_delete` are not read-only. Tool patterns are exact names or a prefix ending in `*`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ade_tasks.rules.models import ToolPalette, ToolPolicy

READ_ONLY_TOOLS = frozenset({"read_file", "list_dir", "glob", "grep"})
WRITE_TOOLS = frozenset({"write_file", "edit_file"})
COMMAND_TOOLS = frozenset({"bash"})
ALWAYS_TOOLS = frozenset({"todo", "report"})
"""Available in every mode and palette: planning notes and the final structured report."""

PermissionMode = Literal["plan", "edit", "full-auto"]
Verdict = Literal["allow", "deny", "ask"]

PALETTE_TOOLS: dict[ToolPalette, tuple[str, ...]] = {
    "repo": ("read_file", "list_dir", "glob", "grep", "write_file", "edit_file"),
    # git and test commands run through bash; there is no separate git or test tool.
    "git": ("bash",),
    "tests": ("bash",),
    # Reserved: no engine tools yet (GitHub and notification tools come with a later milestone).
    "github": (),
    "notify": (),
}
"""The engine tools each palette brings."""

MODE_TOOLS: dict[PermissionMode, frozenset[str]] = {
    "plan": READ_ONLY_TOOLS | ALWAYS_TOOLS,
    "edit": READ_ONLY_TOOLS | ALWAYS_TOOLS | WRITE_TOOLS,
    "full-auto": READ_ONLY_TOOLS | ALWAYS_TOOLS | WRITE_TOOLS | COMMAND_TOOLS,
}
"""The tools each permission mode permits at most."""

_ALWAYS_ORDER = ("todo", "report")


@dataclass(frozen=True)
class Decision:
    """The engine's verdict on one tool call, and why."""

    verdict: Verdict
    reason: str


@dataclass(frozen=True)
class Policy:
    """A rule's tool policy as the engine enforces it."""

    allowed_tools: tuple[str, ...] = ()
    denied_tools: tuple[str, ...] = ()
    sandbox_root: str | None = None
    fallback: Verdict = "deny"

    @classmethod
    def from_rule(cls, policy: ToolPolicy) -> Policy:
        """The enforced form of a rule's `ToolPolicy`."""
        return cls(
            allowed_tools=tuple(policy.allowed_tools),
            denied_tools=tuple(policy.denied_tools),
            sandbox_root=policy.sandbox_root,
            fallback=policy.fallback,
        )


def matching_pattern(tool: str, patterns: Iterable[str]) -> str | None:
    """The first pattern naming `tool`: an exact name, or a prefix ending in `*`."""
    for pattern in patterns:
        if pattern.endswith("*"):
            if tool.startswith(pattern[:-1]):
                return pattern
        elif tool == pattern:
            return pattern
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


def decide(
    policy: Policy, tool: str, *, writes_or_runs_in: Path | None, worktree: Path
) -> Decision:
    """Allow, deny or ask for one call of `tool`, which writes or runs in `writes_or_runs_in`.

    A relative `writes_or_runs_in` is taken from the worktree; a write or command without one
    is judged as acting on the worktree itself.
    """
    denied = matching_pattern(tool, policy.denied_tools)
    if denied is not None:
        return Decision("deny", _listed(tool, denied, "denied_tools"))
    if tool in ALWAYS_TOOLS:  # the agent's own notes and final report touch nothing
        return Decision("allow", f"{tool} only records the agent's notes or report")
    if tool in WRITE_TOOLS or tool in COMMAND_TOOLS:
        escape = _sandbox_escape(policy, tool, writes_or_runs_in, worktree)
        if escape is not None:
            return Decision("deny", escape)
    allowed = matching_pattern(tool, policy.allowed_tools)
    if allowed is not None:
        return Decision("allow", _listed(tool, allowed, "allowed_tools"))
    if policy.fallback == "allow":
        return Decision("allow", f"no rule denies {tool}; the policy's fallback is allow")
    if policy.fallback == "ask" and tool in READ_ONLY_TOOLS:
        return Decision("allow", f"{tool} is read-only; the policy's fallback is ask")
    return Decision(
        policy.fallback, f"no rule allows {tool}; the policy's fallback is {policy.fallback}"
    )


def _listed(tool: str, pattern: str, field: str) -> str:
    if pattern == tool:
        return f"{tool} is in {field}"
    return f"{tool} matches {pattern!r} in {field}"


def _sandbox_escape(policy: Policy, tool: str, target: Path | None, worktree: Path) -> str | None:
    """Why `target` is outside the sandbox, or None when it is inside."""
    real_worktree = os.path.realpath(worktree)
    root_text = policy.sandbox_root or "."
    sandbox = os.path.realpath(os.path.join(real_worktree, root_text))
    label = policy.sandbox_root or "the worktree"
    if not _contains(real_worktree, sandbox):
        return f"sandbox_root {root_text} is outside the worktree; {tool} cannot run"
    real_target = os.path.realpath(os.path.join(real_worktree, target or "."))
    if _contains(sandbox, real_target):
        return None
    shown = os.path.relpath(real_target, sandbox) if target is not None else "."
    if policy.sandbox_root:
        label = f"sandbox_root {policy.sandbox_root}"
    return f"{tool} outside {label}: {shown}"


def _contains(root: str, path: str) -> bool:
    return os.path.commonpath([root, path]) == root
