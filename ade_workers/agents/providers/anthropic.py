"""Anthropic Messages API (`POST {base_url}/v1/messages`, `anthropic-version: 2023-06-01`)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import httpx

from ade_tasks.errors import InvalidInputError
from ade_tasks.json_document import JsonObject
from ade_tasks.retry import RetryPolicy
from ade_tasks.rules.providers import anthropic as declared
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

DEFAULT_BASE_URL = "https://api.anthropic.com"
API_VERSION = "2023-06-01"
PATH = "/v1/messages"


class AnthropicProvider(HttpProvider):
    """A `ModelProvider` for the Anthropic Messages API."""

    PROVIDER = declared.PROVIDER
    VENDOR_PREFIX = "ANTHROPIC_"
    DEFAULT_BASE_URL = DEFAULT_BASE_URL
    MODELS_PATH = "/v1/models"

    def __init__(
        self,
        *,
        base_url: str = DEFAULT_BASE_URL,
        api_key: str | None = None,
        name: str = "anthropic",
        timeout: float = 120.0,
        policy: RetryPolicy = DEFAULT_POLICY,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        # Local gateways may run without a key.
        auth = {"anthropic-version": API_VERSION, **({"x-api-key": api_key} if api_key else {})}
        super().__init__(
            name=name, base_url=base_url, api_key=api_key, auth_headers=auth, timeout=timeout,
            policy=policy, transport=transport, sleep=sleep,
        )  # fmt: skip

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
        system, wire = to_wire(messages)
        body: JsonObject = {"max_tokens": max_tokens, "messages": wire, "model": model}
        if system:
            body["system"] = system
        if tools:
            body["tools"] = [
                {
                    "name": tool["name"],
                    "description": tool["description"],
                    "input_schema": tool["parameters"],
                }
                for tool in tools
            ]
        return self.ask(PATH, body, parse_turn, model=model, deadline=deadline)


def to_wire(messages: list[Message]) -> tuple[str, list[JsonObject]]:
    """The top-level system prompt and the Messages API messages for a neutral conversation."""
    system: list[str] = []
    wire: list[JsonObject] = []
    for message in messages:
        role = message.get("role")
        content = message.get("content") or ""
        if role == "system":
            system.append(str(content))
        elif role == "user":
            wire.append({"role": "user", "content": content})
        elif role == "assistant":
            wire.append({"role": "assistant", "content": _assistant_blocks(message)})
        elif role == "tool":
            block: JsonObject = {
                "type": "tool_result",
                "tool_use_id": message["tool_call_id"],
                "content": str(content),
            }
            if message.get("is_error"):
                block["is_error"] = True
            previous = wire[-1] if wire else None
            # The API wants every result of one assistant turn in the single user turn after it.
            if (
                previous is not None
                and previous["role"] == "user"
                and isinstance(previous["content"], list)
                and all(b.get("type") == "tool_result" for b in previous["content"])
            ):
                previous["content"].append(block)
            else:
                wire.append({"role": "user", "content": [block]})
        else:
            raise InvalidInputError(
                f"message role must be system, user, assistant or tool: {role!r}"
            )
    return "\n\n".join(system), wire


def _assistant_blocks(message: Message) -> str | list[JsonObject]:
    text = str(message.get("content") or "")
    calls = [call_fields(call) for call in message.get("tool_calls") or []]
    if not calls:
        return text
    blocks: list[JsonObject] = [{"type": "text", "text": text}] if text else []
    blocks.extend(
        {"id": call_id, "input": arguments, "name": name, "type": "tool_use"}
        for call_id, name, arguments in calls
    )
    return blocks


def parse_turn(data: JsonObject) -> ModelTurn:
    """A Messages API response body as a `ModelTurn`; ValueError when it has no content."""
    content = data.get("content")
    if not isinstance(content, list):
        raise ValueError(
            f"answered without content blocks: {excerpt(json.dumps(data))}; "
            "check that the base URL points at the Anthropic Messages API"
        )
    texts: list[str] = []
    calls: list[ToolCall] = []
    for block in content:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text":
            texts.append(str(block.get("text") or ""))
        elif block.get("type") == "tool_use":
            arguments = block.get("input")
            calls.append(
                ToolCall(
                    id=str(block.get("id") or f"toolu_{len(calls)}"),
                    name=str(block.get("name") or ""),
                    arguments=arguments if isinstance(arguments, dict) else {},
                    arguments_error=None
                    if isinstance(arguments, dict)
                    else f"input must be a JSON object, got: {excerpt(json.dumps(arguments))}",
                )
            )
    usage = data.get("usage")
    if not isinstance(usage, dict):
        usage = {}
    raw_id = data.get("id")
    return ModelTurn(
        text="".join(texts),
        tool_calls=calls,
        usage=Usage(
            input_tokens=int(usage.get("input_tokens") or 0),
            output_tokens=int(usage.get("output_tokens") or 0),
        ),
        stop_reason=str(data.get("stop_reason") or ""),
        raw_id=raw_id if isinstance(raw_id, str) else None,
    )
