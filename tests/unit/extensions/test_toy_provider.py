"""A new HTTP agent provider is one declaration and one registration line: the toy below is all a
provider needs, and with it registered (`register(ToyProvider)`, which registers its declaration
with the rules too) a rule naming it validates, its session runs, and rule health says whether it
is set up, with nothing else listing providers."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from ade_api.http.health_state import provider_readiness
from ade_tasks.agents.policy import Policy
from ade_tasks.retry import RetryPolicy
from ade_tasks.rules.loader import parse_rule
from ade_tasks.rules.providers.declaration import AgentProvider
from ade_tasks.rules.providers.registry import PROVIDERS
from ade_tasks.rules.rule import Rule
from ade_tasks.settings import ProviderSettings, Settings
from ade_tasks.triggers.health import LiveState, ProviderReadiness, rule_health
from ade_workers.agents.http_session import SessionLimits, run_session
from ade_workers.agents.providers import (
    HttpProvider,
    Message,
    ModelTurn,
    ToolCall,
    ToolSpec,
    registry,
)
from ade_workers.agents.providers.registry import http_provider
from ade_workers.agents.readiness import providers_report
from ade_workers.agents.tools.tool import ToolContext

# --- the toy provider: everything it is, in one place -----------------------------------------

TOY = AgentProvider("toy")


def toy_model(request: httpx.Request) -> httpx.Response:
    """The toy's API, in process: list the worktree first, then say what it holds."""
    if request.url.path.endswith("/models"):
        known = request.headers.get("X-Toy-Key") == "toy-key"
        return httpx.Response(200 if known else 401, json={"models": ["toy-1"]})
    messages = json.loads(request.content)["messages"]
    listed = [m["content"] for m in messages if m["role"] == "tool"]
    if not listed:
        call = {"id": "c1", "name": "list_dir", "arguments": {"path": "."}}
        return httpx.Response(200, json={"text": "", "calls": [call]})
    return httpx.Response(200, json={"text": f"the worktree holds {listed[-1].strip()}"})


class ToyProvider(HttpProvider):
    """A model behind the toy's API: one POST per turn, its text and tool calls back."""

    PROVIDER = TOY
    VENDOR_PREFIX = "TOY_"
    DEFAULT_BASE_URL = "http://toy.invalid/v1"
    MODELS_PATH = "/models"

    def __init__(self, *, base_url: str, api_key: str | None) -> None:
        super().__init__(
            name=TOY.name,
            base_url=base_url,
            api_key=api_key,
            auth_headers={"X-Toy-Key": api_key or ""},
            timeout=5.0,
            policy=RetryPolicy(attempts=1),
            transport=httpx.MockTransport(toy_model),
            sleep=lambda _seconds: None,
        )

    def complete(
        self,
        messages: list[Message],
        tools: list[ToolSpec],
        *,
        model: str,
        max_tokens: int,
        deadline: float | None,
    ) -> ModelTurn:
        body = {"model": model, "messages": messages, "tools": [t["name"] for t in tools]}
        return self.ask("/reply", body, _turn, model=model, deadline=deadline)


def _turn(data: dict[str, Any]) -> ModelTurn:
    calls = [ToolCall(c["id"], c["name"], c["arguments"]) for c in data.get("calls", [])]
    return ModelTurn(text=data["text"], tool_calls=calls)


@pytest.fixture(autouse=True)
def toy_registered() -> Iterator[None]:
    registry.register(ToyProvider)  # the registration: one line
    yield
    registry.unregister(ToyProvider)


# --- what follows from it --------------------------------------------------------------------

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
TOY_RULE = {
    "id": "toy-review",
    "triggers": [{"type": "manual"}],
    "execution": {"kind": "agent-session", "provider": "toy", "model": "toy-1", "prompt": "look"},
}


def toy_rule() -> Rule:
    parsed = parse_rule(TOY_RULE, "config/rules/toy.yaml")
    assert isinstance(parsed, Rule), parsed
    return parsed


def test_a_rule_naming_the_toy_provider_validates() -> None:
    rule = toy_rule()

    assert rule.execution.provider == "toy"


def test_an_unregistered_provider_is_refused_with_the_registered_names() -> None:
    registry.unregister(ToyProvider)
    assert "toy" not in PROVIDERS and "toy" not in registry.HTTP_PROVIDERS

    refused = parse_rule(TOY_RULE, "config/rules/toy.yaml")

    assert not isinstance(refused, Rule)
    assert "'toy' is not allowed; use one of 'openai', 'anthropic', 'claude-code' or 'codex'" in (
        str(refused)
    )


def test_the_toy_session_runs_its_tool_loop_to_an_answer(tmp_path: Path) -> None:
    # Given the toy configured as a run reads it, and a worktree holding one file
    (tmp_path / "README.md").write_text("hello\n")
    settings = Settings(providers={"toy": ProviderSettings(api_key=SecretStr("toy-key"))})
    events: list[tuple[str, dict[str, Any]]] = []

    # When a session runs on the adapter the registry builds for the rule's provider
    execution = toy_rule().execution
    provider = http_provider(execution.provider, settings)
    outcome = run_session(
        provider,
        model="toy-1",
        max_tokens_per_turn=512,
        system="You are careful.",
        prompt="What is in the worktree?",
        tools=["list_dir"],
        policy=Policy.from_rule(execution.policy, execution.permission_mode),
        tool_ctx=ToolContext(worktree=tmp_path, env={"PATH": os.environ["PATH"]}),
        limits=SessionLimits(max_turns=5, max_tokens=None, deadline=time.monotonic() + 30),
        history=[],
        record=lambda kind, data: events.append((kind, data)),
    )

    # Then the toy listed the worktree through the engine's tool and answered from it
    assert outcome.status == "completed", outcome.error
    assert outcome.summary == "the worktree holds README.md"
    results = [data for kind, data in events if kind == "agent.tool_result"]
    assert [(data["tool"], data["ok"]) for data in results] == [("list_dir", True)]
    assert provider.check_key(5.0) == (True, "http://toy.invalid/v1/models accepted the key")


def test_rule_health_says_the_toy_is_not_set_up_until_its_key_is() -> None:
    no_cli = lambda *_a, **_k: None  # noqa: E731
    unset = provider_readiness(Settings(), which=no_cli)
    keyed = Settings(providers={"toy": ProviderSettings(api_key=SecretStr("toy-key"))})

    before = rule_health(toy_rule(), LiveState(NOW, providers=unset))
    after = rule_health(toy_rule(), LiveState(NOW, providers=provider_readiness(keyed, no_cli)))

    assert unset["toy"] == ProviderReadiness(False, ("export ADE_PROVIDERS__TOY__API_KEY=...",))
    assert before.errors == [
        "agent provider 'toy' is not set up: export ADE_PROVIDERS__TOY__API_KEY=..."
    ]
    assert after.ready and not after.errors


def test_ade_tasks_providers_lists_the_toy_with_its_vendor_variable() -> None:
    report = {status.name: status for status in providers_report({"TOY_API_KEY": "k"})}

    assert report["toy"].ready
    assert report["toy"].credentials == "TOY_API_KEY"
    assert report["toy"].base_url == "http://toy.invalid/v1"
