"""Model providers: one neutral turn shape and one `ModelProvider` protocol, one module per API.

A provider turns a neutral conversation into its wire format, sends it, and returns the model's
answer as a `ModelTurn`. Neutral messages are plain dicts:

    {"role": "system" | "user" | "assistant", "content": str, "tool_calls"?: [ToolCall, ...]}
    {"role": "tool", "tool_call_id": str, "name": str, "content": str, "is_error": bool}

An assistant's `tool_calls` may hold `ToolCall` objects or dicts with `id`, `name`, `arguments`.
`HttpProvider` is what the HTTP adapters share: their endpoint as an `IntegrationClient`
(`ade_workers.integrations.http`: retries, deadlines, scrubbing, `IntegrationError` /
`IntegrationUnavailableError`), the provider's key checks and its advice on a refusal.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import ClassVar, Protocol, TypedDict

import httpx

from ade_tasks.errors import InvalidInputError
from ade_tasks.json_document import JsonObject
from ade_tasks.retry import RetryPolicy
from ade_tasks.rules.providers.declaration import AgentProvider
from ade_workers.integrations.http import IntegrationClient, IntegrationUnavailableError, excerpt

DEFAULT_POLICY = RetryPolicy(attempts=3)
_GIVE_UP = "try again later, or raise the provider's retry attempts or timeout"

Message = JsonObject


class ToolSpec(TypedDict):
    """A tool the model may call: its name, what it does, and its arguments as JSON schema."""

    name: str
    description: str
    parameters: JsonObject


@dataclass(frozen=True)
class ToolCall:
    """One call the model asked for; `arguments_error` says why `arguments` could not be read."""

    id: str
    name: str
    arguments: JsonObject
    arguments_error: str | None = None


@dataclass(frozen=True)
class Usage:
    """Tokens the provider billed for one turn."""

    input_tokens: int = 0
    output_tokens: int = 0


@dataclass(frozen=True)
class ModelTurn:
    """The model's answer to one request: its text, the tools it wants called, and the cost."""

    text: str
    tool_calls: list[ToolCall] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    stop_reason: str = ""
    raw_id: str | None = None


class ModelProvider(Protocol):
    """Sends a neutral conversation to a model and returns its next turn."""

    def complete(
        self,
        messages: list[Message],
        tools: list[ToolSpec],
        *,
        model: str,
        max_tokens: int,
        deadline: float | None,
    ) -> ModelTurn:
        """The model's next turn; `deadline` is a `time.monotonic()` instant."""
        ...


class HttpModelProvider(ModelProvider, Protocol):
    """A model provider over HTTP (`HttpProvider`'s adapters): closed after its session, and
    able to check its key."""

    def close(self) -> None: ...

    def check_key(self, timeout: float) -> tuple[bool, str]: ...


def call_fields(call: ToolCall | Mapping[str, object]) -> tuple[str, str, JsonObject]:
    """`(id, name, arguments)` of an assistant message's tool call, object or dict."""
    if isinstance(call, ToolCall):
        return call.id, call.name, call.arguments
    arguments = call.get("arguments") or {}
    if not isinstance(arguments, dict):
        raise InvalidInputError(f"tool call {call.get('id')!r}: arguments must be a dict")
    return str(call["id"]), str(call["name"]), arguments


class HttpProvider:
    """What the HTTP adapters share: a named endpoint, its key as the adapter's auth headers,
    and one pooled client that `close` releases. Each adapter says which provider it runs
    (its `ade_tasks.rules.providers` declaration), the prefix of its vendor's own variables
    (`OPENAI_` for OPENAI_API_KEY and OPENAI_BASE_URL, which `ade-tasks providers` accepts in a
    shell), where its API lives by default and where it lists models (what
    `ade-tasks providers --check` asks)."""

    PROVIDER: ClassVar[AgentProvider]
    VENDOR_PREFIX: ClassVar[str]
    DEFAULT_BASE_URL: ClassVar[str]
    MODELS_PATH: ClassVar[str]

    def __init__(
        self,
        *,
        name: str,
        base_url: str,
        api_key: str | None,
        auth_headers: Mapping[str, str],
        timeout: float,
        policy: RetryPolicy,
        transport: httpx.BaseTransport | None,
        sleep: Callable[[float], None],
    ) -> None:
        self.name = name
        self.env_prefix = f"ADE_PROVIDERS__{name.upper()}__"
        self._key = api_key or None
        self._http = IntegrationClient(
            f"provider {name!r}",
            base_url,
            url_fix=f"check {self.env_prefix}BASE_URL",
            timeout=timeout,
            policy=policy,
            headers={"Accept": "application/json", **auth_headers},
            secrets=[api_key],
            # Several endpoints under one base URL: the whole URL says which one answered.
            urls="full",
            explain=_error_message,
            transport=transport,
            sleep=sleep,
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, base_url={self._http.where!r})"

    def close(self) -> None:
        """Close the pooled connections."""
        self._http.close()

    def check_key(self, timeout: float) -> tuple[bool, str]:
        """List the models with this key once: (accepted?, what happened in words)."""
        where = f"{self._http.where}{self.MODELS_PATH}"
        try:
            response = self._http.exchange("GET", self.MODELS_PATH, timeout=timeout)
        except IntegrationUnavailableError as exc:
            return False, exc.message
        if response.status_code == 200:
            return True, f"{where} accepted the key"
        said = self._http.scrub(excerpt(response.text))
        return False, f"{where} answered {response.status_code}: {said}"

    def ask(
        self,
        path: str,
        body: JsonObject,
        parse: Callable[[JsonObject], ModelTurn],
        *,
        model: str,
        deadline: float | None,
    ) -> ModelTurn:
        """POST `body` to `path` and `parse` the answer (a ValueError saying what it lacks),
        retrying transient failures."""
        subject = self._http.subject("POST", path)

        def attempt() -> ModelTurn:
            response = self._http.send(
                "POST", path, deadline=deadline, advice=lambda s: self._advice(s, model), json=body
            )
            try:
                data = response.json()
            except ValueError:
                # A 200 cut short by a proxy or an overloaded server: the same request may succeed.
                raise self._http.unavailable(
                    f"{subject} answered {response.status_code} with malformed JSON: "
                    f"{self._http.scrub(excerpt(response.text))!r}"
                ) from None
            if not isinstance(data, dict):
                raise self._http.refused(
                    f"{subject} answered with {type(data).__name__}, not a JSON object; "
                    f"check {self.env_prefix}BASE_URL"
                )
            try:
                return parse(data)
            except ValueError as exc:
                raise self._http.refused(f"{subject} {exc}") from None

        return self._http.retrying(
            f"model {model!r} gave no answer", attempt, deadline=deadline, advice=_GIVE_UP
        )

    def _advice(self, status: int, model: str) -> str:
        if status == 401:
            return (
                f"check {self.env_prefix}API_KEY: it is missing, expired or revoked"
                if self._key
                else f"set {self.env_prefix}API_KEY"
            )
        if status == 403:
            return f"check that the key in {self.env_prefix}API_KEY may use model {model!r}"
        if status == 404:
            return f"check the model name {model!r} and {self.env_prefix}BASE_URL"
        return "fix the request (the provider's message says what it rejected)"


def _error_message(response: httpx.Response) -> str:
    """The message of an OpenAI-style or Anthropic-style error body, or the start of the text."""
    try:
        data = response.json()
    except ValueError:
        return excerpt(response.text)
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        kind = error.get("type")
        prefix = f"{kind}: " if isinstance(kind, str) and kind else ""
        return excerpt(prefix + error["message"])
    return excerpt(json.dumps(data))
