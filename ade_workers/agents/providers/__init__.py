"""Model providers: one neutral turn shape and one `ModelProvider` protocol, one module per API.

A provider turns a neutral conversation into its wire format, sends it, and returns the model's
answer as a `ModelTurn`. Neutral messages are plain dicts:

    {"role": "system" | "user" | "assistant", "content": str, "tool_calls"?: [ToolCall, ...]}
    {"role": "tool", "tool_call_id": str, "name": str, "content": str, "is_error": bool}

An assistant's `tool_calls` may hold `ToolCall` objects or dicts with `id`, `name`, `arguments`.
`ProviderHttp` is the HTTP transport the providers share: retries under a `RetryPolicy`, a
per-request timeout bounded by the run's deadline, and errors that say what to do.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, TypedDict

import httpx

from ade_tasks.errors import AdeError, InvalidInputError, TransientError
from ade_tasks.retry import RetryPolicy, retry_after_seconds

log = logging.getLogger(__name__)

DEFAULT_POLICY = RetryPolicy(attempts=3)
_EXCERPT = 300

Message = dict[str, Any]


class ToolSpec(TypedDict):
    """A tool the model may call: its name, what it does, and its arguments as JSON schema."""

    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(frozen=True)
class ToolCall:
    """One call the model asked for; `arguments_error` says why `arguments` could not be read."""

    id: str
    name: str
    arguments: dict[str, Any]
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


class ProviderError(AdeError):
    """The model provider refused the request; repeating it unchanged will not help."""

    def __init__(self, message: str | None = None, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class ProviderUnavailableError(TransientError):
    """The model provider could not be reached, timed out or asked us to come back later."""

    def __init__(self, message: str | None = None, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


def call_fields(call: ToolCall | Mapping[str, Any]) -> tuple[str, str, dict[str, Any]]:
    """`(id, name, arguments)` of an assistant message's tool call, object or dict."""
    if isinstance(call, ToolCall):
        return call.id, call.name, call.arguments
    arguments = call.get("arguments") or {}
    if not isinstance(arguments, dict):
        raise InvalidInputError(f"tool call {call.get('id')!r}: arguments must be a dict")
    return str(call["id"]), str(call["name"]), arguments


def excerpt(text: str) -> str:
    """At most a few hundred characters of `text`, for an error message."""
    text = text.strip()
    return text if len(text) <= _EXCERPT else text[:_EXCERPT] + "..."


class ProviderHttp:
    """JSON POSTs to one provider endpoint, retried under a policy, with actionable errors."""

    def __init__(
        self,
        *,
        label: str,
        env_prefix: str,
        base_url: str,
        headers: Mapping[str, str],
        secret: str | None,
        timeout: float,
        policy: RetryPolicy,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        url = httpx.URL(base_url.rstrip("/"))
        if url.scheme not in ("http", "https") or not url.host:
            raise InvalidInputError(
                f"{label} base URL must be http(s)://host[:port][/prefix], got scheme "
                f"{url.scheme!r}; check {env_prefix}BASE_URL"
            )
        if timeout <= 0:
            raise InvalidInputError(f"{label} timeout must be > 0 seconds, got {timeout}")
        self.label = label
        self.env_prefix = env_prefix
        self.timeout = timeout
        self.policy = policy
        self._secret = secret or None
        self._sleep = sleep
        # Shown in messages: never the userinfo part of a URL pasted with credentials.
        self.where = str(url.copy_with(username=None, password=None))
        self._http = httpx.Client(
            base_url=url, headers=dict(headers), timeout=timeout, transport=transport
        )

    def __repr__(self) -> str:
        return f"ProviderHttp(label={self.label!r}, base_url={self.where!r})"

    def close(self) -> None:
        """Close the pooled connections."""
        self._http.close()

    def probe(self, path: str, timeout: float) -> tuple[bool, str]:
        """GET `path` once: (answered 200?, what happened in words)."""
        where = f"{self.where}{path}"
        try:
            response = self._http.get(path, timeout=timeout)
        except httpx.HTTPError as exc:
            return (
                False,
                f"{where} could not be reached: {type(exc).__name__}: {self._scrub(str(exc))}",
            )
        if response.status_code == 200:
            return True, f"{where} accepted the key"
        return (
            False,
            f"{where} answered {response.status_code}: {self._scrub(excerpt(response.text))}",
        )

    def call(
        self,
        path: str,
        body: Mapping[str, Any],
        parse: Callable[[dict[str, Any]], ModelTurn],
        *,
        model: str,
        deadline: float | None,
    ) -> ModelTurn:
        """POST `body` to `path` and `parse` the answer, retrying transient failures."""
        tries = 0

        def attempt() -> ModelTurn:
            nonlocal tries
            tries += 1
            return parse(self._post(path, body, model, deadline))

        def note(number: int, exc: TransientError, delay: float) -> None:
            log.warning("%s retry %d in %.2fs: %s", self.label, number, delay, exc)

        try:
            return self.policy.run(attempt, deadline=deadline, sleep=self._sleep, on_retry=note)
        except ProviderUnavailableError as exc:
            why = (
                "the retry policy allows no more"
                if tries >= self.policy.max_tries
                else "the deadline leaves no time for another"
            )
            raise ProviderUnavailableError(
                f"{self.label} model {model!r} gave no answer: {exc.message}; gave up after "
                f"{tries} attempt{'s' if tries != 1 else ''} ({why}); try again later, "
                "or raise the provider's retry attempts or timeout",
                retry_after=exc.retry_after,
            ) from exc

    def _post(
        self, path: str, body: Mapping[str, Any], model: str, deadline: float | None
    ) -> dict[str, Any]:
        timeout = self.timeout
        if deadline is not None:
            timeout = min(timeout, deadline - time.monotonic())
            if timeout <= 0:
                raise ProviderUnavailableError(f"POST {path}: the run's deadline has passed")
        try:
            response = self._http.post(path, json=body, timeout=timeout)
        except httpx.TimeoutException:
            raise ProviderUnavailableError(
                f"POST {path}: {self.where} did not answer within {timeout:g}s"
            ) from None
        except httpx.TransportError as exc:
            raise ProviderUnavailableError(
                f"POST {path}: could not reach {self.where} "
                f"({type(exc).__name__}: {self._scrub(str(exc))})"
            ) from None
        if not response.is_success:
            raise self._error_for(path, model, response)
        try:
            data = response.json()
        except ValueError:
            # A 200 cut short by a proxy or an overloaded server: the same request may succeed.
            raise ProviderUnavailableError(
                f"POST {path}: {self.where} answered {response.status_code} with malformed "
                f"JSON: {self._scrub(excerpt(response.text))!r}"
            ) from None
        if not isinstance(data, dict):
            raise ProviderError(
                f"POST {path}: {self.where} answered with {type(data).__name__}, not a JSON "
                f"object; check {self.env_prefix}BASE_URL"
            )
        return data

    def _error_for(self, path: str, model: str, response: httpx.Response) -> AdeError:
        status = response.status_code
        said = self._scrub(_error_message(response))
        head = f"POST {path} to {self.where} answered {status}" + (f" ({said})" if said else "")
        if status in (408, 429) or status >= 500:
            seconds = retry_after_seconds(response.headers.get("retry-after"))
            return ProviderUnavailableError(head, retry_after=seconds)
        if status == 401:
            todo = (
                f"check {self.env_prefix}API_KEY: it is missing, expired or revoked"
                if self._secret
                else f"set {self.env_prefix}API_KEY"
            )
        elif status == 403:
            todo = f"check that the key in {self.env_prefix}API_KEY may use model {model!r}"
        elif status == 404:
            todo = f"check the model name {model!r} and {self.env_prefix}BASE_URL"
        else:
            todo = "fix the request (the provider's message says what it rejected)"
        return ProviderError(f"{head}; {todo}", status=status)

    def _scrub(self, text: str) -> str:
        return text.replace(self._secret, "***") if self._secret else text


class HttpProvider:
    """What the HTTP adapters share: a named endpoint, its key as the adapter's auth headers,
    and one pooled client that `close` releases. Each adapter says where its API lives by
    default and where it lists models (what `ade-tasks providers --check` asks)."""

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
        self._http = ProviderHttp(
            label=f"provider {name!r}",
            env_prefix=f"ADE_PROVIDERS__{name.upper()}__",
            base_url=base_url,
            headers={"Accept": "application/json", "User-Agent": "ade-tasks", **auth_headers},
            secret=api_key,
            timeout=timeout,
            policy=policy,
            transport=transport,
            sleep=sleep,
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, base_url={self._http.where!r})"

    def close(self) -> None:
        """Close the pooled connections."""
        self._http.close()

    def check_key(self, timeout: float) -> tuple[bool, str]:
        """List the models with this key: (accepted?, what happened in words)."""
        return self._http.probe(self.MODELS_PATH, timeout)


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
