"""Model-provider adapters against a scripted loopback server replaying recorded wire formats.

The fixtures are copies of recorded or documented provider traffic (tests/fixtures/agents/*/
README.md). Neither provider has a recorded 401 or 500 body: the 401 tests serve each
provider's recorded error envelope with status 401, and the 500 tests an empty body.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable, Iterator
from contextlib import closing
from dataclasses import dataclass
from typing import Any

import pytest

from ade_tasks.errors import NotFoundError
from ade_tasks.retry import RetryPolicy
from ade_tasks.settings import Settings
from ade_workers.agents.provider_check import check_provider
from ade_workers.agents.providers import ToolCall, ToolSpec, Usage
from ade_workers.agents.providers.anthropic import AnthropicProvider
from ade_workers.agents.providers.anthropic import to_wire as anthropic_wire
from ade_workers.agents.providers.openai import OpenAIProvider
from ade_workers.agents.providers.registry import http_provider
from ade_workers.integrations.http import IntegrationError, IntegrationUnavailableError
from tests.fake_llm import Reply, ScriptedModelServer, fixture_text, load_fixture

KEY = "sk-test-9f8e7d6c5b4a-SECRET"
FAST = RetryPolicy(attempts=2, initial_delay=0.01, max_delay=2.0)

OPENAI_TOOL_RESPONSE = "chat-completions.tool-calls.response.json"
ANTHROPIC_ROUND_TRIP = "messages.tool-use-round-trip.recorded.json"
ANTHROPIC_TOOL_ERROR = "messages.tool-result-is-error.recorded.json"


@dataclass(frozen=True)
class Case:
    """How to build one provider and which recorded answers it replays."""

    name: str
    make: Callable[[str, RetryPolicy, float], Any]
    path: str
    key_env: str
    success: Callable[[], Reply]
    success_text: Callable[[], str]
    rate_limited: Callable[[str], Reply]
    error_envelope: Callable[[], Any]


def _openai(url: str, policy: RetryPolicy, timeout: float) -> OpenAIProvider:
    return OpenAIProvider(base_url=f"{url}/v1", api_key=KEY, policy=policy, timeout=timeout)


def _anthropic(url: str, policy: RetryPolicy, timeout: float) -> AnthropicProvider:
    return AnthropicProvider(base_url=url, api_key=KEY, policy=policy, timeout=timeout)


CASES = [
    Case(
        name="openai",
        make=_openai,
        path="/v1/chat/completions",
        key_env="ADE_PROVIDERS__OPENAI__API_KEY",
        success=lambda: Reply(body=load_fixture("openai", OPENAI_TOOL_RESPONSE)),
        success_text=lambda: fixture_text("openai", OPENAI_TOOL_RESPONSE),
        rate_limited=lambda after: Reply(
            status=429,
            headers={"Retry-After": after},
            body=load_fixture("openai", "error.429-insufficient-quota.json"),
        ),
        error_envelope=lambda: load_fixture("openai", "error.429-insufficient-quota.json"),
    ),
    Case(
        name="anthropic",
        make=_anthropic,
        path="/v1/messages",
        key_env="ADE_PROVIDERS__ANTHROPIC__API_KEY",
        success=lambda: Reply.recorded(
            load_fixture("anthropic", ANTHROPIC_ROUND_TRIP)[0]["response"]
        ),
        success_text=lambda: json.dumps(
            load_fixture("anthropic", ANTHROPIC_ROUND_TRIP)[0]["response"]["body"]
        ),
        rate_limited=lambda after: Reply.recorded(
            load_fixture("anthropic", "error.429-rate-limit.recorded.json"),
            **{"retry-after": after},
        ),
        error_envelope=lambda: load_fixture("anthropic", "error.400-invalid-request.recorded.json")[
            "body"
        ],
    ),
]

USER = [{"role": "user", "content": "What's the weather?"}]


@pytest.fixture
def server() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer() as running:
        yield running


def _tools(wire_tools: list[dict[str, Any]], schema_key: str) -> list[ToolSpec]:
    return [
        {"name": t["name"], "description": t["description"], "parameters": t[schema_key]}
        for t in wire_tools
    ]


# -- OpenAI Chat Completions --------------------------------------------------------------------


def test_openai_tool_call_round_trip(server: ScriptedModelServer) -> None:
    # Given the documented request and its recorded tool-call answer
    recorded = load_fixture("openai", "chat-completions.tool-calls.request.json")
    tools = _tools([t["function"] for t in recorded["tools"]], "parameters")
    server.script(CASES[0].success(), CASES[0].success())
    with closing(_openai(server.url, FAST, 2.0)) as provider:
        # When the model is asked, then told the tool's result
        turn = provider.complete(
            recorded["messages"], tools, model=recorded["model"], max_tokens=256, deadline=None
        )
        result = '{"temperature": "22", "unit": "celsius"}'
        follow_up = [
            *recorded["messages"],
            {"role": "assistant", "content": turn.text, "tool_calls": turn.tool_calls},
            {
                "role": "tool",
                "tool_call_id": turn.tool_calls[0].id,
                "name": turn.tool_calls[0].name,
                "content": result,
                "is_error": False,
            },
        ]
        provider.complete(follow_up, tools, model=recorded["model"], max_tokens=256, deadline=None)

    # Then the tool call and usage come from the recording
    assert turn.tool_calls == [
        ToolCall("call_abc123", "get_current_weather", {"location": "Boston, MA"})
    ]
    assert (turn.text, turn.stop_reason, turn.raw_id) == ("", "tool_calls", "chatcmpl-abc123")
    assert turn.usage == Usage(input_tokens=82, output_tokens=17)
    # And the first request carries the documented messages and tools
    first, second = server.requests
    assert first.path == "/v1/chat/completions"
    assert first.headers["authorization"] == f"Bearer {KEY}"
    assert first.json["messages"] == recorded["messages"]
    assert first.json["tools"] == recorded["tools"]
    assert (first.json["model"], first.json["max_tokens"]) == ("gpt-5.4", 256)
    # And the follow-up echoes the call and sends the result as a "tool" message
    assert second.json["messages"][1:] == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_abc123",
                    "type": "function",
                    "function": {
                        "name": "get_current_weather",
                        "arguments": json.dumps({"location": "Boston, MA"}),
                    },
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_abc123", "content": result},
    ]


def test_openai_malformed_arguments_are_reported_on_the_call(server: ScriptedModelServer) -> None:
    # Given the recorded answer with its arguments string cut short
    body = load_fixture("openai", OPENAI_TOOL_RESPONSE)
    call = body["choices"][0]["message"]["tool_calls"][0]
    call["function"]["arguments"] = call["function"]["arguments"][:12]
    server.script(Reply(body=body))
    with closing(_openai(server.url, FAST, 2.0)) as provider:
        # When the turn is parsed
        turn = provider.complete(USER, [], model="m", max_tokens=64, deadline=None)

    # Then the call is kept, with an error the loop can show the model
    (parsed,) = turn.tool_calls
    assert (parsed.id, parsed.name, parsed.arguments) == ("call_abc123", "get_current_weather", {})
    assert parsed.arguments_error is not None
    assert "not valid JSON" in parsed.arguments_error


# -- Anthropic Messages -------------------------------------------------------------------------


def _without_caller(body: dict[str, Any]) -> dict[str, Any]:
    """The recorded request minus the SDK's `caller` echo, which the API does not require."""
    body = copy.deepcopy(body)
    for message in body["messages"]:
        if isinstance(message["content"], list):
            for block in message["content"]:
                block.pop("caller", None)
    return body


@pytest.mark.parametrize("name", [ANTHROPIC_ROUND_TRIP, ANTHROPIC_TOOL_ERROR])
def test_anthropic_tool_use_round_trip(server: ScriptedModelServer, name: str) -> None:
    # Given a recorded tool-use loop: the tool_use answer, then the final text
    first_pair, second_pair = load_fixture("anthropic", name)
    request = first_pair["request"]["body"]
    tools = _tools(request["tools"], "input_schema")
    recorded_result = second_pair["request"]["body"]["messages"][2]["content"][0]
    server.script(Reply.recorded(first_pair["response"]), Reply.recorded(second_pair["response"]))
    with closing(_anthropic(server.url, FAST, 2.0)) as provider:
        # When the model is asked, then told the tool's result
        turn = provider.complete(
            request["messages"],
            tools,
            model=request["model"],
            max_tokens=request["max_tokens"],
            deadline=None,
        )
        follow_up = [
            *request["messages"],
            {"role": "assistant", "content": turn.text, "tool_calls": turn.tool_calls},
            {
                "role": "tool",
                "tool_call_id": turn.tool_calls[0].id,
                "name": turn.tool_calls[0].name,
                "content": recorded_result["content"],
                "is_error": recorded_result.get("is_error", False),
            },
        ]
        final = provider.complete(
            follow_up,
            tools,
            model=request["model"],
            max_tokens=request["max_tokens"],
            deadline=None,
        )

    # Then the tool_use block and usage come from the recording
    block = first_pair["response"]["body"]["content"][0]
    assert turn.tool_calls == [ToolCall(block["id"], block["name"], block["input"])]
    assert turn.stop_reason == "tool_use"
    assert turn.raw_id == first_pair["response"]["body"]["id"]
    usage = first_pair["response"]["body"]["usage"]
    assert turn.usage == Usage(usage["input_tokens"], usage["output_tokens"])
    assert final.text == second_pair["response"]["body"]["content"][0]["text"]
    assert final.stop_reason == "end_turn"
    # And both requests are the recorded ones, the tool result as a user tool_result block
    first, second = server.requests
    assert first.path == "/v1/messages"
    assert first.headers["x-api-key"] == KEY
    assert first.headers["anthropic-version"] == "2023-06-01"
    assert first.json == request
    assert second.json == _without_caller(second_pair["request"]["body"])


def test_anthropic_system_prompt_and_consecutive_tool_results() -> None:
    # Given a system prompt and two results of one assistant turn
    calls = [ToolCall("toolu_1", "a", {}), ToolCall("toolu_2", "b", {"x": 1})]
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Go"},
        {"role": "assistant", "content": "", "tool_calls": calls},
        {
            "role": "tool",
            "tool_call_id": "toolu_1",
            "name": "a",
            "content": "ok",
            "is_error": False,
        },
        {"role": "tool", "tool_call_id": "toolu_2", "name": "b", "content": "no", "is_error": True},
    ]

    # When converted
    system, wire = anthropic_wire(messages)

    # Then the system prompt is top-level and the results share one user message
    assert system == "Be brief."
    assert wire[-1] == {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"},
            {"type": "tool_result", "tool_use_id": "toolu_2", "content": "no", "is_error": True},
        ],
    }
    assert len(wire) == 3


def test_anthropic_400_is_not_retried_and_carries_the_message(server: ScriptedModelServer) -> None:
    # Given the recorded 400 invalid_request_error
    server.script(
        Reply.recorded(load_fixture("anthropic", "error.400-invalid-request.recorded.json"))
    )
    with closing(_anthropic(server.url, FAST, 2.0)) as provider:
        # When asked, then it fails at once with the provider's message
        with pytest.raises(IntegrationError) as caught:
            provider.complete(USER, [], model="m", max_tokens=64, deadline=None)

    assert not isinstance(caught.value, IntegrationUnavailableError)
    assert caught.value.status == 400
    assert "unexpected `tool_use_id`" in caught.value.message
    assert len(server.requests) == 1


# -- both providers: retries, timeouts, refusals ------------------------------------------------


@pytest.fixture(params=CASES, ids=[case.name for case in CASES])
def case(request: pytest.FixtureRequest) -> Case:
    return request.param  # type: ignore[no-any-return]


def test_429_with_retry_after_then_success(server: ScriptedModelServer, case: Case) -> None:
    # Given a recorded 429 asking for a 0.3 s wait, then a recorded answer
    server.script(case.rate_limited("0.3"), case.success())
    with closing(case.make(server.url, FAST, 2.0)) as provider:
        # When asked
        turn = provider.complete(USER, [], model="m", max_tokens=64, deadline=None)

    # Then the second try came after the requested wait and succeeded
    first, second = server.requests
    assert second.at - first.at >= 0.3
    assert turn.tool_calls


def test_500_then_success(server: ScriptedModelServer, case: Case) -> None:
    # Given a 500, then a recorded answer
    server.script(Reply(status=500, raw=""), case.success())
    with closing(case.make(server.url, FAST, 2.0)) as provider:
        # When asked
        turn = provider.complete(USER, [], model="m", max_tokens=64, deadline=None)

    # Then it retried once and succeeded
    assert len(server.requests) == 2
    assert turn.tool_calls


def test_malformed_json_then_success(server: ScriptedModelServer, case: Case) -> None:
    # Given a 200 whose recorded body is cut in half, then the whole answer
    text = case.success_text()
    server.script(Reply(raw=text[: len(text) // 2]), case.success())
    with closing(case.make(server.url, FAST, 2.0)) as provider:
        # When asked
        turn = provider.complete(USER, [], model="m", max_tokens=64, deadline=None)

    # Then the broken answer was retried
    assert len(server.requests) == 2
    assert turn.tool_calls


def test_hang_on_every_attempt_gives_up_naming_the_attempts(
    server: ScriptedModelServer, case: Case
) -> None:
    # Given a server that never answers within the 0.2 s timeout
    server.script(*[Reply(delay=2.0, body={}) for _ in range(3)])
    with closing(case.make(server.url, FAST, 0.2)) as provider:
        # When asked
        started = time.monotonic()
        with pytest.raises(IntegrationUnavailableError) as caught:
            provider.complete(USER, [], model="m", max_tokens=64, deadline=None)

    # Then all three attempts timed out and the error says so
    assert len(server.requests) == 3
    assert "gave up after 3 attempts" in caught.value.message
    assert "did not answer within 0.2s" in caught.value.message
    assert time.monotonic() - started < 1.5


def test_deadline_bounds_the_request_timeout(server: ScriptedModelServer, case: Case) -> None:
    # Given a long timeout but a run deadline 0.3 s away, and a hanging server
    server.script(*[Reply(delay=2.0, body={}) for _ in range(3)])
    with closing(case.make(server.url, FAST, 10.0)) as provider:
        # When asked
        started = time.monotonic()
        with pytest.raises(IntegrationUnavailableError):
            provider.complete(USER, [], model="m", max_tokens=64, deadline=started + 0.3)

    # Then it gave up at the deadline, not after the timeout
    assert time.monotonic() - started < 1.0


def test_401_is_not_retried_and_hides_the_key(server: ScriptedModelServer, case: Case) -> None:
    # Given the provider's recorded error envelope served as a 401
    server.script(Reply(status=401, body=case.error_envelope()))
    with closing(case.make(server.url, FAST, 2.0)) as provider:
        # When asked
        with pytest.raises(IntegrationError) as caught:
            provider.complete(USER, [], model="m", max_tokens=64, deadline=None)
        shown = repr(provider)

    # Then one request was made, and the error says what to fix without showing the key
    assert not isinstance(caught.value, IntegrationUnavailableError)
    assert len(server.requests) == 1
    assert caught.value.status == 401
    assert case.key_env in caught.value.message
    assert case.error_envelope()["error"]["message"][:40] in caught.value.message
    assert KEY not in caught.value.message
    assert KEY not in shown


@pytest.mark.parametrize(
    ("name", "models_path", "key_header"),
    [("openai", "/models", "authorization"), ("anthropic", "/v1/models", "x-api-key")],
)
def test_the_key_check_lists_the_models_with_the_key_and_says_what_failed(
    name: str, models_path: str, key_header: str
) -> None:
    with ScriptedModelServer() as server:
        settings = Settings(providers={name: {"base_url": server.url, "api_key": KEY}})
        server.script(Reply(body={"data": []}), Reply(status=401, raw=f'{{"echo": "{KEY}"}}'))
        accepted = check_provider(name, settings)
        refused = check_provider(name, settings)
    assert (accepted.ok, accepted.detail) == (True, f"{server.url}{models_path} accepted the key")
    assert [r.path for r in server.requests] == [models_path, models_path]
    assert KEY in server.requests[0].headers[key_header]
    assert not refused.ok
    assert refused.detail.startswith(f"{server.url}{models_path} answered 401: ")
    assert KEY not in refused.detail  # an API echoing the key back never shows it


def test_a_provider_without_a_key_is_not_called_and_an_unknown_one_names_the_known() -> None:
    assert check_provider("openai", Settings()).detail == (
        "no key: set ADE_PROVIDERS__OPENAI__API_KEY"
    )
    with pytest.raises(NotFoundError, match=r"'mistral' is not an HTTP provider this worker knows "
                       r"\(anthropic, openai\); check the rule's execution.provider"):  # fmt: skip
        http_provider("mistral", Settings())
