"""How tool names are compared: the patterns of a rule's tool policy against the names tools
really have (`mcp__server__tool` written `mcp:server:tool`, case-folded, `*` as a prefix).

In the rules room, apart from the policy (`ade_tasks.agents.policy`), so the rule models can
check a policy without importing the policy, which imports them."""

from __future__ import annotations

from collections.abc import Iterable


def canonical_tool(name: str) -> str:
    """The name patterns are compared with: case-folded, `mcp__server__tool` as
    `mcp:server:tool`."""
    folded = name.casefold()
    if folded.startswith("mcp__"):
        server, _, tool = folded[len("mcp__") :].partition("__")
        return f"mcp:{server}:{tool}" if tool else f"mcp:{server}"
    return folded


def matching_pattern(tool: str, patterns: Iterable[str]) -> str | None:
    """The first pattern naming `tool`: an exact name, or a prefix ending in `*`."""
    name = canonical_tool(tool)
    for pattern in patterns:
        wanted = canonical_tool(pattern)
        if wanted.endswith("*"):
            if name.startswith(wanted[:-1]):
                return pattern
        elif name == wanted:
            return pattern
    return None
