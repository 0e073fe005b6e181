"""What the domain knows of one agent provider: its name, the prefix of its settings, and what
it cannot enforce on a session (checked when a rule is admitted).

The provider reads a session through `SessionShape`, so a declaration imports no rule model and
the registry stays below `ade_tasks.rules.agent`, which validates against it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol


class PolicyShape(Protocol):
    """The tool policy of a session, as a provider's checks read it."""

    @property
    def allowed_tools(self) -> list[str]: ...
    @property
    def denied_tools(self) -> list[str]: ...
    @property
    def fallback(self) -> str: ...
    @property
    def sandbox_root(self) -> str | None: ...
    @property
    def model_fields_set(self) -> set[str]: ...


class SessionShape(Protocol):
    """An agent session (`ade_tasks.rules.agent.AgentSession`), as a provider's checks read it."""

    @property
    def permission_mode(self) -> str: ...
    @property
    def policy(self) -> PolicyShape: ...
    @property
    def model_fields_set(self) -> set[str]: ...


def never_refuses(_session: SessionShape) -> str | None:
    """A provider that enforces every part of a session."""
    return None


@dataclass(frozen=True)
class AgentProvider:
    """One agent provider: the name rules use, why it cannot call the engine's own tools and
    what to use instead (the github and notify palettes; None: it can), and what of a session
    it could not enforce (`refusal`: the reason the rule is refused, or None)."""

    name: str
    without_engine_tools: str | None = None
    refusal: Callable[[SessionShape], str | None] = never_refuses

    @property
    def settings_prefix(self) -> str:
        """The prefix of its settings: `ADE_PROVIDERS__CLAUDE_CODE__` for `claude-code`."""
        return f"ADE_PROVIDERS__{self.name.upper().replace('-', '_')}__"
