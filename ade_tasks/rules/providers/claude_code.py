"""`claude-code`: the Claude Code CLI, headless; it reaches the engine's tools through the
engine's MCP bridge."""

from ade_tasks.rules.providers.declaration import AgentProvider

PROVIDER = AgentProvider("claude-code")
