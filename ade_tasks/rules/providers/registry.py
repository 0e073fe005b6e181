"""The agent providers, in the order rules, reports and health list them.

Adding one: its module in `ade_tasks/rules/providers/` (a `PROVIDER`) and one line here, then
what runs it in `ade_workers/agents/providers/registry.py`, whose `register(MyAdapter)` registers
an HTTP provider's declaration here too (so a provider outside this package is one line). The
rule models, rule health and `ade-tasks providers` read `PROVIDERS` at each call.
"""

from __future__ import annotations

from ade_tasks.rules.providers import anthropic, claude_code, codex, openai
from ade_tasks.rules.providers.declaration import AgentProvider

PROVIDERS: dict[str, AgentProvider] = {
    provider.name: provider
    for provider in (
        openai.PROVIDER,
        anthropic.PROVIDER,
        claude_code.PROVIDER,
        codex.PROVIDER,
    )
}


def register(provider: AgentProvider) -> None:
    """Let rules name `provider`; ValueError if another provider has its name."""
    known = PROVIDERS.get(provider.name)
    if known is not None and known is not provider:
        raise ValueError(f"agent provider {provider.name!r} is registered already")
    PROVIDERS[provider.name] = provider


def unregister(provider: AgentProvider) -> None:
    """Rules may no longer name `provider`."""
    if PROVIDERS.get(provider.name) is provider:
        del PROVIDERS[provider.name]


def provider_names() -> str:
    """The registered names as a rule's error lists them: 'openai', 'anthropic' or 'codex'."""
    quoted = [repr(name) for name in PROVIDERS]
    return " or ".join([", ".join(quoted[:-1]), quoted[-1]]) if len(quoted) > 1 else quoted[0]
