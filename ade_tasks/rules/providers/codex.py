"""`codex`: the Codex CLI over its app-server protocol. It has no turn limit, applies file
changes inside its workspace without asking its client, and cannot call the engine's tools, so
a rule that relies on any of these is refused, not run and reported afterwards."""

from __future__ import annotations

from ade_tasks.rules.providers.declaration import AgentProvider, SessionShape
from ade_tasks.rules.tool_names import matching_pattern


def unenforceable_on_codex(session: SessionShape) -> str | None:
    """What a codex session of this rule could do that the engine could not stop, or None.

    Codex (0.169, workspace-write) applies file changes inside its workspace without asking
    its client, and has no turn limit; a rule that relies on either is refused, not run and
    reported afterwards.
    """
    if "max_turns" in session.model_fields_set:
        return (
            "max_turns cannot be enforced on provider codex (it has no turn limit): remove it; "
            "timeout_sec, max_tokens and max_cost_usd bound a codex session"
        )
    if session.permission_mode == "plan":
        return None
    policy = session.policy
    writes = ("write_file", "edit_file")
    denied = [t for t in writes if matching_pattern(t, policy.denied_tools)]
    allowed = all(matching_pattern(t, policy.allowed_tools) for t in writes)
    unset = "fallback" not in policy.model_fields_set  # edit's writes in the worktree allowed
    if (
        not denied
        and policy.sandbox_root is None
        and (allowed or unset or policy.fallback == "allow")
    ):
        return None
    why = (
        f"policy.denied_tools names {', '.join(denied)}"
        if denied
        else "policy.sandbox_root is set"
        if policy.sandbox_root is not None
        else f"its fallback {policy.fallback} applies to writes no allowed_tools entry names"
    )
    return (
        f"policy cannot be enforced on provider codex in permission_mode {session.permission_mode}"
        f": codex applies file changes inside its workspace without asking, so the engine cannot "
        f"refuse or ask for them ({why}). Allow writes (policy.allowed_tools: [write_file, "
        "edit_file], no sandbox_root), use permission_mode: plan, or use provider claude-code"
    )


PROVIDER = AgentProvider(
    "codex",
    without_engine_tools=(
        "(it uses its own tools): use provider claude-code, openai or anthropic for them, or "
        "publish through outputs / an ade-action step"
    ),
    refusal=unenforceable_on_codex,
)
