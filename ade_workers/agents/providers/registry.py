"""The LLM APIs the engine drives itself (`execution.provider` of an agent session), by name.

Adding one: its adapter module (an `HttpProvider` with `complete` and the class attributes that
say which provider it runs, its vendor's variables, its default URL and its models path) and one
line, `register(MyAdapter)`, which registers its declaration (`PROVIDER`) with the rules too.
Rule validation, rule health, `ade-tasks providers` and `--check` follow from those. The built-in
providers' declarations live in `ade_tasks/rules/providers/` and are listed in its registry,
because rules are validated where the workers are not loaded; registering them again here
changes nothing. The CLI agents (claude-code, codex) register apart, with
`ade_workers.agents.cli.cli_session.register(DRIVER)`.
"""

from __future__ import annotations

from typing import Protocol

from ade_tasks.errors import not_registered
from ade_tasks.rules.providers import registry as rule_providers
from ade_tasks.rules.providers.declaration import AgentProvider
from ade_tasks.settings import Settings
from ade_workers.agents.providers import HttpModelProvider
from ade_workers.agents.providers.anthropic import AnthropicProvider
from ade_workers.agents.providers.openai import OpenAIProvider


class HttpAdapter(Protocol):
    """An adapter class: its provider, its vendor's variables, its defaults, and built from a
    base URL and a key."""

    PROVIDER: AgentProvider
    VENDOR_PREFIX: str
    DEFAULT_BASE_URL: str
    MODELS_PATH: str

    def __call__(self, *, base_url: str, api_key: str | None) -> HttpModelProvider: ...


CHECK_PROVIDER = "check the rule's execution.provider"
HTTP_PROVIDERS: dict[str, HttpAdapter] = {}


def register(adapter: HttpAdapter) -> None:
    """Let rules name the adapter's provider and sessions run on it; ValueError if another
    adapter or declaration has its name."""
    name = adapter.PROVIDER.name
    if HTTP_PROVIDERS.get(name, adapter) is not adapter:
        raise ValueError(f"HTTP provider {name!r} has an adapter already")
    rule_providers.register(adapter.PROVIDER)
    HTTP_PROVIDERS[name] = adapter


def unregister(adapter: HttpAdapter) -> None:
    """Rules may no longer name the adapter's provider, nor sessions run on it."""
    if HTTP_PROVIDERS.get(adapter.PROVIDER.name) is adapter:
        del HTTP_PROVIDERS[adapter.PROVIDER.name]
    rule_providers.unregister(adapter.PROVIDER)


register(OpenAIProvider)
register(AnthropicProvider)


def http_provider(name: str, settings: Settings) -> HttpModelProvider:
    """The adapter of provider `name`, with its base URL and key from settings (the adapter's
    default URL when none is set); NotFoundError naming the known providers otherwise."""
    adapter = HTTP_PROVIDERS.get(name)
    if adapter is None:
        raise not_registered("an HTTP provider", name, HTTP_PROVIDERS, CHECK_PROVIDER)
    configured = settings.provider(name)
    base_url = (configured.base_url if configured else None) or adapter.DEFAULT_BASE_URL
    key = configured.api_key.get_secret_value() if configured and configured.api_key else None
    return adapter(base_url=base_url, api_key=key)
