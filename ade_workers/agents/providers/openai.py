"""OpenAI Chat Completions (`POST {base_url}/chat/completions`) and the servers that speak it:
OpenAI, vLLM, Ollama, LM Studio and most gateways, told apart only by their base URL.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import httpx

from ade_tasks.errors import InvalidInputError
from ade_tasks.json_document import JsonObject
from ade_tasks.retry import RetryPolicy
from ade_tasks.rules.providers import openai as declared
from ade_workers.agents.providers import (
    DEFAULT_POLICY,
    HttpProvider,
    Message,
    ModelTurn,
    ToolCall,
    ToolSpec,
    Usage,
    call_fields,
)
from ade_workers.integrations.http import excerpt

DEFAULT_BASE_URL = "https://api.openai.com/v1"
PATH = "/chat/completions"


class OpenAIProvider(HttpProvider):
    """A `ModelProvider` for any Chat Completions endpoint."""

    PROVIDER = declared.PROVIDER
    VENDOR_PREFIX = "OPENAI_"
    DEFAULT_BASE_URL = DEFAULT_BASE_URL
    MODELS_PATH = "/models"

    def __init__(
        self,
        *,
        base_url: str = DEFAULT_BASE_URL,
        api_key: str | None = None,
        name: str = "openai",
        timeout: float = 120.0,
        policy: RetryPolicy = DEFAULT_POLICY,
        max_tokens_field: str = "max_tokens",
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        # Local servers (Ollama, LM Studio, vLLM) usually run without a key.
        auth = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        super().__init__(
            name=name, base_url=base_url, api_key=api_key, auth_headers=auth, timeout=timeout,
            policy=policy, transport=transport, sleep=sleep,
        )  # fmt: skip
        # OpenAI's newer models want `max_completion_tokens`; many compatible servers only know
        # `max_tokens`.
        self.max_tokens_field = max_tokens_field

    def complete(
        self,
        messages: list[Message],
        tools: list[ToolSpec],
        *,
        model: str,
        max_tokens: int,
        deadline: float | None,
    ) -> ModelTurn:
        """The model's next turn for `messages`, offering it `tools`."""
        body: JsonObject = {
            "model": model,
            "messages": [to_wire(message) for message in messages],
            self.max_tokens_field: max_tokens,
        }
        if tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": tool["name"],
                        "description": tool["description"],
                        "parameters": tool["parameters"],
                    },
                }
                for tool in tools
            ]
        return self.ask(PATH, body, parse_turn, model=model, deadline=deadline)


def to_wire(message: Message) -> JsonObject:
    """One neutral message as a Chat Completions message."""
    role = message.get("role")
    if role in ("system", "user"):
        return {"role": role, "content": message.get("content") or ""}
    if role == "assistant":
        wire: JsonObject = {"role": "assistant", "content": message.get("content") or None}
        calls = [call_fields(call) for call in message.get("tool_calls") or []]
        if calls:
            wire["tool_calls"] = [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(arguments)},
                }
                for call_id, name, arguments in calls
            ]
        return wire
    if role == "tool":
        content = str(message.get("content") or "")
        # Chat Completions has no error flag on tool results; the model reads the prefix.
        if message.get("is_error"):
            content = f"ERROR: {content}"
        return {"role": "tool", "tool_call_id": message["tool_call_id"], "content": content}
    raise InvalidInputError(f"message role must be system, user, assistant or tool: {role!r}")


def parse_turn(data: JsonObject) -> ModelTurn:
    """A Chat Completions response body as a `ModelTurn`; ValueError when it has no choices."""
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise ValueError(
            f"answered without choices: {excerpt(json.dumps(data))}; "
            "check that the base URL points at a Chat Completions API"
        )
    choice = choices[0]
    message = _object(choice.get("message"))
    calls = [_tool_call(call, n) for n, call in enumerate(message.get("tool_calls") or [])]
    usage = _object(data.get("usage"))
    raw_id = data.get("id")
    return ModelTurn(
        text=message.get("content") or "",
        tool_calls=calls,
        usage=Usage(
            input_tokens=int(usage.get("prompt_tokens") or 0),
            output_tokens=int(usage.get("completion_tokens") or 0),
        ),
        stop_reason=str(choice.get("finish_reason") or ""),
        raw_id=raw_id if isinstance(raw_id, str) else None,
    )


def _object(value: object) -> JsonObject:
    return value if isinstance(value, dict) else {}


def _tool_call(call: object, index: int) -> ToolCall:
    call = _object(call)
    function = _object(call.get("function"))
    call_id = str(call.get("id") or f"call_{index}")
    name = str(function.get("name") or "")
    raw = function.get("arguments")
    # Some compatible servers send the arguments as an object rather than a JSON string.
    if isinstance(raw, dict):
        return ToolCall(call_id, name, raw)
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return ToolCall(call_id, name, {})
    try:
        arguments = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError as exc:
        return ToolCall(
            call_id, name, {}, f"arguments are not valid JSON ({exc}): {excerpt(str(raw))}"
        )
    if not isinstance(arguments, dict):
        return ToolCall(
            call_id, name, {}, f"arguments must be a JSON object, got: {excerpt(str(raw))}"
        )
    return ToolCall(call_id, name, arguments)
