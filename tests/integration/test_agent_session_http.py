"""The agent tool loop over the real HTTP providers, against a scripted loopback server.

The tool-call turns are the recorded fixtures (tests/fixtures/agents/*), with the call pointed
at an engine tool (`read_file`) instead of the recording's weather tool; ids, usage and the rest
of the wire shape are the recording's. No external service is needed.
"""

from __future__ import annotations

import copy
import json
import os
import time
from collections.abc import Callable, Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ade_tasks.agents.policy import Policy
from ade_tasks.agents.protected import ProtectedPaths
from ade_tasks.retry import RetryPolicy
from ade_tasks.settings import Settings
from ade_workers.agents.http_session import SessionLimits, SessionOutcome, run_session
from ade_workers.agents.providers import ModelProvider
from ade_workers.agents.providers.anthropic import AnthropicProvider
from ade_workers.agents.providers.openai import OpenAIProvider
from ade_workers.agents.tools.tool import ToolContext
from tests.fake_llm import Reply, ScriptedModelServer, load_fixture

KEY = "sk-test-session-0123456789"
FAST = RetryPolicy(attempts=2, initial_delay=0.01, max_delay=2.0)
READ = {"path": "README.md"}
README = "hello from the worktree\n"
NUMBERED = "     1\thello from the worktree\n"


def _openai_tool_call() -> Reply:
    body = load_fixture("openai", "chat-completions.tool-calls.response.json")
    function = body["choices"][0]["message"]["tool_calls"][0]["function"]
    function.update(name="read_file", arguments=json.dumps(READ))
    return Reply(body=body)


def _openai_final() -> Reply:
    body = load_fixture("openai", "chat-completions.tool-calls.response.json")
    body["choices"][0].update(
        message={"role": "assistant", "content": "The README says hello."}, finish_reason="stop"
    )
    return Reply(body=body)


def _anthropic_pairs() -> Any:
    return load_fixture("anthropic", "messages.tool-use-round-trip.recorded.json")


def _anthropic_tool_call() -> Reply:
    response = copy.deepcopy(_anthropic_pairs()[0]["response"])
    response["body"]["content"][0].update(name="read_file", input=READ)
    return Reply.recorded(response)


def _anthropic_final() -> Reply:
    return Reply.recorded(_anthropic_pairs()[1]["response"])


@dataclass(frozen=True)
class Case:
    """One provider: how to build it, its recorded turns, and where it sends the tool result."""

    name: str
    make: Callable[[str], Any]
    tool_call: Callable[[], Reply]
    final: Callable[[], Reply]
    rate_limited: Callable[[], Reply]
    call_id: str
    final_text: str
    tool_result_sent: Callable[[dict[str, Any]], Any]
    expected_result: Any


CASES = [
    Case(
        name="openai",
        make=lambda url: OpenAIProvider(base_url=f"{url}/v1", api_key=KEY, policy=FAST),
        tool_call=_openai_tool_call,
        final=_openai_final,
        rate_limited=lambda: Reply(
            status=429,
            headers={"Retry-After": "0.1"},
            body=load_fixture("openai", "error.429-insufficient-quota.json"),
        ),
        call_id="call_abc123",
        final_text="The README says hello.",
        tool_result_sent=lambda body: body["messages"][3:],
        expected_result=[
            {"role": "tool", "tool_call_id": "call_abc123", "content": NUMBERED},
        ],
    ),
    Case(
        name="anthropic",
        make=lambda url: AnthropicProvider(base_url=url, api_key=KEY, policy=FAST),
        tool_call=_anthropic_tool_call,
        final=_anthropic_final,
        rate_limited=lambda: Reply.recorded(
            load_fixture("anthropic", "error.429-rate-limit.recorded.json"),
            **{"retry-after": "0.1"},
        ),
        call_id="toolu_013DU6hV4C1M8dJ32ybQFAFi",
        final_text=_anthropic_pairs()[1]["response"]["body"]["content"][0]["text"],
        tool_result_sent=lambda body: body["messages"][2:],
        expected_result=[
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_013DU6hV4C1M8dJ32ybQFAFi",
                        "content": NUMBERED,
                    }
                ],
            }
        ],
    ),
]


@pytest.fixture(params=CASES, ids=[case.name for case in CASES])
def case(request: pytest.FixtureRequest) -> Case:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
def server() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer() as running:
        yield running


@pytest.fixture
def worktree(tmp_path: Path) -> Path:
    (tmp_path / "README.md").write_text(README)
    return tmp_path


def _run(
    provider: ModelProvider, worktree: Path, events: list[tuple[str, dict[str, Any]]]
) -> SessionOutcome:
    return run_session(
        provider,
        model="test-model",
        max_tokens_per_turn=256,
        system="You read files.",
        prompt="What does the README say?",
        tools=["read_file", "report"],
        policy=Policy(allowed_tools=("read_file", "report"), fallback="deny"),
        tool_ctx=ToolContext(worktree=worktree, env={"PATH": os.environ["PATH"]}),
        limits=SessionLimits(max_turns=5, max_tokens=None, deadline=time.monotonic() + 30),
        history=[],
        record=lambda kind, data: events.append((kind, data)),
    )


def test_full_session_over_http(server: ScriptedModelServer, case: Case, worktree: Path) -> None:
    # Given the recorded tool-call turn, then a final text turn
    server.script(case.tool_call(), case.final())
    events: list[tuple[str, dict[str, Any]]] = []

    # When a session runs against the provider
    with closing(case.make(server.url)) as provider:
        outcome = _run(provider, worktree, events)

    # Then the tool ran and its result went back in the provider's wire format
    assert (outcome.status, outcome.summary, outcome.turns) == ("completed", case.final_text, 2)
    first, second = server.requests
    offered = [tool.get("function", tool)["name"] for tool in first.json["tools"]]
    assert offered == ["read_file", "report"]
    assert case.tool_result_sent(second.json) == case.expected_result
    # And the transcript holds both turns and the result between them
    assert [kind for kind, _ in events] == [
        "agent.model_turn",
        "agent.tool_result",
        "agent.model_turn",
    ]
    assert events[0][1]["tool_calls"] == [
        {"id": case.call_id, "name": "read_file", "arguments": READ}
    ]
    assert events[1][1]["content"] == NUMBERED


def test_429_then_success_inside_a_session(
    server: ScriptedModelServer, case: Case, worktree: Path
) -> None:
    # Given a recorded 429 before the tool-call turn
    server.script(case.rate_limited(), case.tool_call(), case.final())
    events: list[tuple[str, dict[str, Any]]] = []

    # When a session runs
    with closing(case.make(server.url)) as provider:
        outcome = _run(provider, worktree, events)

    # Then the provider retried and the session completed, the retry not counted as a turn
    assert (outcome.status, outcome.turns) == ("completed", 2)
    assert len(server.requests) == 3
    assert server.requests[1].at - server.requests[0].at >= 0.1
    assert server.requests[0].json == server.requests[1].json


def _pointed_at(case: Case, reply: Reply, arguments: dict[str, Any]) -> Reply:
    """The recorded tool-call turn with the call's arguments replaced."""
    if case.name == "openai":
        function = reply.body["choices"][0]["message"]["tool_calls"][0]["function"]
        function["arguments"] = json.dumps(arguments)
    else:
        reply.body["content"][0]["input"] = arguments
    return reply


def test_the_engine_data_never_reaches_the_provider(
    server: ScriptedModelServer, case: Case, worktree: Path
) -> None:
    # Given a data dir inside the worktree under another name, holding the API token
    token = "ade_dev_token_value_0123456789"
    (worktree / "state").mkdir()
    (worktree / "state" / "api-token").write_text(token + "\n")
    settings = Settings(data_dir=worktree / "state")
    ctx = ToolContext(
        worktree=worktree,
        env={"PATH": os.environ["PATH"]},
        protected=ProtectedPaths.from_settings(settings, worktree),
    )
    server.script(_pointed_at(case, case.tool_call(), {"path": "state/api-token"}), case.final())
    events: list[tuple[str, dict[str, Any]]] = []

    # When the model reads it in a session allowed to read anything
    with closing(case.make(server.url)) as provider:
        outcome = run_session(
            provider,
            model="test-model",
            max_tokens_per_turn=256,
            system="You read files.",
            prompt="What does the token say?",
            tools=["read_file", "report"],
            policy=Policy(allowed_tools=("*",), fallback="allow", mode="plan"),
            tool_ctx=ctx,
            limits=SessionLimits(max_turns=5, max_tokens=None, deadline=time.monotonic() + 30),
            history=[],
            record=lambda kind, data: events.append((kind, data)),
        )

    # Then the engine refused it, and the token reached neither the provider nor the transcript
    assert outcome.status == "completed"
    (refused,) = [data for kind, data in events if kind == "agent.refused"]
    assert refused["reason"].startswith("refused: state/api-token is the engine's own data")
    assert token not in json.dumps([r.json for r in server.requests])
    assert token not in json.dumps(events)
