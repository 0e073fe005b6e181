"""`anthropic`: the Messages API."""

from ade_tasks.rules.providers.declaration import AgentProvider

PROVIDER = AgentProvider("anthropic")
