"""Custom webhook configuration: how a hook authenticates, what it admits, and what is logged.

A hook is configured in settings (`HookConfig`); the endpoint `POST /api/v1/webhooks/{hook_id}`
runs the checks of `CHECK_ORDER` with the functions of this module and of
`ade_tasks.hooks.signatures`, and writes a delivery log with `redact_headers`.

Authentication comes before the rate limit, so that only authentic deliveries count on
`rate_per_minute`: one refused before it passed authentication (a wrong token or signature, a
stale timestamp, a body too large or too slow to read) counts on `rejected_per_minute` instead
and is logged on a ring of its own. Someone without the secret can then fill only the rejected
window and ring, never get an authentic delivery refused or pushed out of the log. Over
`rejected_per_minute`, refusals are answered 429 and no longer logged. (A captured authentic
delivery replayed counts as authentic: `standard-webhooks` and `stripe` refuse replays older
than their tolerance; `hmac-sha256` and `token` carry no timestamp to refuse them by.)

Filters (`JsonFilter`) address the parsed JSON body by a dotted path (`pull_request.base.ref`,
`commits.0.id`): a number indexes a list (non-negative only) and is a plain key in an object; a
key that itself contains a dot cannot be addressed. Operators:

- `equals` / `not_equals`: exact JSON equality (`1` equals `1.0`, but `true` never equals `1` and
  `"42"` never equals `42`); a missing path never equals, so `not_equals` is true for it.
- `contains`: substring of a string (string values only), an element of a list (exact JSON
  equality), a key of an object; false for anything else, including a missing path.
- `exists`: the path is present **and not null** (GitHub sends many unset fields as `null`, e.g.
  `pull_request.merged_at`, and an operator asking "does it exist" means "is it set");
  `value: false` inverts it. `value` defaults to true.
- `matches`: a search with the regex in `value` on string values only, run by RE2
  (`ade_tasks.patterns`: linear time, so a hostile body cannot stall the API); compiled when
  the config is validated, so a bad pattern, or one RE2 cannot express (backreferences,
  lookarounds), is refused at load time. A string longer than `patterns.MAX_SUBJECT_CHARS` does
  not match, and the delivery log says why.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence, Sized
from enum import Enum
from typing import Any, Literal, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SecretStr,
    ValidationInfo,
    field_validator,
    model_validator,
)

from ade_tasks.hooks.signatures import (
    DEFAULT_TOLERANCE_SECONDS,
    SignatureError,
    header_value,
    standard_webhooks_key,
    timestamp_age_ok,
)
from ade_tasks.patterns import (
    MAX_SUBJECT_CHARS,
    Pattern,
    PatternError,
    SubjectTooLongError,
    compile_pattern,
)

__all__ = [
    "CHECK_ORDER",
    "HookConfig",
    "JsonFilter",
    "SignatureError",
    "delivery_id",
    "filters_match",
    "redact_headers",
    "timestamp_age_ok",
]

Scheme = Literal["hmac-sha256", "standard-webhooks", "stripe", "token"]
FilterOp = Literal["equals", "not_equals", "contains", "exists", "matches"]

#: The order the endpoint runs its checks: an unknown hook or a wrong token costs no body read,
#: and no HMAC is computed for an oversized or stale delivery. The rate limit comes after the
#: signature so that forgeries count on their own limit (`rejected_per_minute`), never on the
#: authentic deliveries' (an HMAC of a body of at most 25 MiB is cheap next to the database
#: write every delivery costs). Filters and duplicate detection need an authentic body.
CHECK_ORDER = ("token", "hook", "size", "age", "signature", "rate", "filters", "duplicate")

TIMESTAMP_SCHEMES = frozenset({"standard-webhooks", "stripe"})
MIN_BODY_BYTES = 1024
MAX_BODY_BYTES = 25 * 1024 * 1024
DEFAULT_BODY_BYTES = 1_048_576
MAX_RATE_PER_MINUTE = 100_000
MAX_TOLERANCE_SECONDS = 3600
MAX_FILTERS = 20
MAX_SECRETS = 10
MAX_ID_HEADERS = 10
#: `ingress_events.delivery_id` is a String(255); a longer id is stored as its hash.
MAX_DELIVERY_ID_LENGTH = 255
DEFAULT_ID_HEADERS = (
    "X-GitHub-Delivery",
    "webhook-id",
    "svix-id",
    "X-Request-Id",
    "Idempotency-Key",
)
REDACTED = "[redacted]"
#: Headers whose value never reaches the delivery log (lower-case).
REDACTED_HEADERS = frozenset(
    {
        "authorization",
        "proxy-authorization",
        "cookie",
        "set-cookie",
        "x-hub-signature",
        "x-hub-signature-256",
        "webhook-signature",
        "svix-signature",
        "stripe-signature",
    }
)
#: A header whose name contains one of these is redacted too: senders invent credential headers
#: (X-Gitlab-Token, X-Api-Key, X-Auth-...) faster than a list can follow.
REDACTED_NAME_PARTS = ("token", "secret", "signature", "password", "auth", "api-key", "apikey")

_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_SHOW_LIMIT = 80


class _Missing(Enum):
    MISSING = "missing"


_MISSING = _Missing.MISSING


class JsonFilter(BaseModel):
    """One condition on the JSON body of a delivery; a hook admits a delivery if all hold."""

    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)

    path: str
    op: FilterOp
    value: Any = None

    _pattern: Pattern | None = PrivateAttr(default=None)

    @field_validator("path")
    @classmethod
    def _check_path(cls, path: str) -> str:
        if not path or any(not segment for segment in path.split(".")):
            raise ValueError(
                f"path {path!r} has an empty segment: use keys and list indexes joined by dots, "
                "e.g. pull_request.base.ref or commits.0.id"
            )
        return path

    @model_validator(mode="after")
    def _check_value(self) -> Self:
        given = "value" in self.model_fields_set
        if self.op == "exists":
            if not given:
                self.value = True
            elif not isinstance(self.value, bool):
                raise ValueError(f"value: op exists takes true or false, got {_show(self.value)}")
        elif not given:
            raise ValueError(f"value: op {self.op} needs a value to compare {self.path} with")
        elif self.op == "matches":
            if not isinstance(self.value, str):
                raise ValueError(f"value: op matches needs a regex string, got {_show(self.value)}")
            try:
                self._pattern = compile_pattern(self.value)
            except PatternError as exc:
                raise ValueError(f"value: {exc.message}") from None
        return self

    def describe(self) -> str:
        """The filter in words, for the delivery log: `action equals 'opened'`."""
        if self.op == "exists":
            return f"{self.path} exists" if self.value else f"{self.path} does not exist"
        return f"{self.path} {self.op} {_show(self.value)}"

    def evaluate(self, body: object) -> bool:
        """Whether the parsed JSON body satisfies this filter."""
        found = _lookup(body, self.path.split("."))
        if self.op == "exists":
            present = found is not _MISSING and found is not None
            return present is bool(self.value)
        if found is _MISSING:
            return self.op == "not_equals"
        if self.op == "equals":
            return _json_equal(found, self.value)
        if self.op == "not_equals":
            return not _json_equal(found, self.value)
        if self.op == "contains":
            return _contains(found, self.value)
        if not isinstance(found, str):
            return False
        return self._search(found)

    def _search(self, text: str) -> bool:
        pattern = self._pattern or compile_pattern(str(self.value))
        try:
            return pattern.search(text)
        except SubjectTooLongError:  # filters_match says why
            return False


class HookConfig(BaseModel):
    """One custom webhook: its signature scheme, secrets or tokens, limits and filters."""

    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)

    # Field order matters: the validators below read `scheme` from the fields before them.
    scheme: Scheme
    secrets: list[SecretStr] = Field(default_factory=list, validate_default=True)
    tokens: list[SecretStr] = Field(default_factory=list, validate_default=True)
    header: str = "X-Signature-256"
    encoding: Literal["hex", "base64"] = "hex"
    prefix: str = ""
    max_body_bytes: int = DEFAULT_BODY_BYTES
    rate_per_minute: int = 60
    rejected_per_minute: int = 60  # refusals before authentication, counted and logged apart
    tolerance_seconds: int | None = None
    filters: list[JsonFilter] = Field(default_factory=list)
    id_headers: list[str] = Field(default_factory=lambda: list(DEFAULT_ID_HEADERS))

    @property
    def tolerance(self) -> int:
        """Allowed clock skew of a signed timestamp, in seconds (default 300)."""
        return self.tolerance_seconds or DEFAULT_TOLERANCE_SECONDS

    @field_validator("secrets")
    @classmethod
    def _check_secrets(cls, secrets: list[SecretStr], info: ValidationInfo) -> list[SecretStr]:
        scheme = info.data.get("scheme")
        if scheme is None:
            return secrets  # the scheme itself is invalid and reported on its own
        if scheme == "token":
            if secrets:
                raise ValueError(
                    "scheme token verifies the URL token only: put the values in tokens, "
                    "or choose a signing scheme"
                )
            return secrets
        if not secrets:
            raise ValueError(
                f"scheme {scheme} needs at least one secret (list several to rotate keys)"
            )
        _check_count("secrets", secrets, MAX_SECRETS)
        for index, secret in enumerate(secrets):
            value = secret.get_secret_value()
            if not value.strip():
                raise ValueError(f"secret #{index + 1} is empty")
            if scheme == "standard-webhooks":
                try:
                    standard_webhooks_key(value)
                except ValueError as exc:
                    raise ValueError(
                        f"secret #{index + 1} is not a Standard Webhooks secret: {exc}"
                    ) from None
        return secrets

    @field_validator("tokens")
    @classmethod
    def _check_tokens(cls, tokens: list[SecretStr], info: ValidationInfo) -> list[SecretStr]:
        if info.data.get("scheme") == "token" and not tokens:
            raise ValueError("scheme token needs at least one token (list several to rotate them)")
        _check_count("tokens", tokens, MAX_SECRETS)
        for index, token in enumerate(tokens):
            if not token.get_secret_value().strip():
                raise ValueError(f"token #{index + 1} is empty")
        return tokens

    @field_validator("header")
    @classmethod
    def _check_header(cls, header: str) -> str:
        if not _HEADER_NAME.fullmatch(header):
            raise ValueError(f"{header!r} is not a valid HTTP header name")
        return header

    @field_validator("max_body_bytes")
    @classmethod
    def _check_body_size(cls, size: int) -> int:
        if not MIN_BODY_BYTES <= size <= MAX_BODY_BYTES:
            raise ValueError(
                f"must be between {MIN_BODY_BYTES} (1 KiB) and {MAX_BODY_BYTES} (25 MiB) bytes, "
                f"got {size}"
            )
        return size

    @field_validator("rate_per_minute", "rejected_per_minute")
    @classmethod
    def _check_rate(cls, rate: int) -> int:
        if not 1 <= rate <= MAX_RATE_PER_MINUTE:
            raise ValueError(f"must be between 1 and {MAX_RATE_PER_MINUTE}, got {rate}")
        return rate

    @field_validator("tolerance_seconds")
    @classmethod
    def _check_tolerance(cls, tolerance: int | None, info: ValidationInfo) -> int | None:
        if tolerance is None:
            return None
        scheme = info.data.get("scheme")
        if scheme is not None and scheme not in TIMESTAMP_SCHEMES:
            raise ValueError(
                f"scheme {scheme} carries no timestamp, so a tolerance has no effect: remove it"
            )
        if not 1 <= tolerance <= MAX_TOLERANCE_SECONDS:
            raise ValueError(f"must be between 1 and {MAX_TOLERANCE_SECONDS} s, got {tolerance}")
        return tolerance

    @field_validator("filters")
    @classmethod
    def _check_filters(cls, filters: list[JsonFilter]) -> list[JsonFilter]:
        if len(filters) > MAX_FILTERS:
            raise ValueError(
                f"at most {MAX_FILTERS} filters per hook, got {len(filters)}: combine "
                "alternatives into one `matches` regex, or split the hook"
            )
        return filters

    @field_validator("id_headers")
    @classmethod
    def _check_id_headers(cls, names: list[str]) -> list[str]:
        _check_count("id_headers", names, MAX_ID_HEADERS)
        for name in names:
            if not _HEADER_NAME.fullmatch(name):
                raise ValueError(f"{name!r} is not a valid HTTP header name")
        return names

    @model_validator(mode="after")
    def _check_hmac_only_fields(self) -> Self:
        # header/encoding/prefix only shape the hmac-sha256 scheme; a changed value elsewhere
        # means the operator expects an effect that will not happen.
        if self.scheme == "hmac-sha256":
            return self
        for name in ("header", "encoding", "prefix"):
            if getattr(self, name) != HookConfig.model_fields[name].default:
                raise ValueError(
                    f"{name}: only used by scheme hmac-sha256; scheme {self.scheme} has fixed "
                    "headers and encoding: remove it"
                )
        return self


def filters_match(filters: Sequence[JsonFilter], body: object) -> tuple[bool, str | None]:
    """Whether every filter holds for the parsed body, and if not, the first failure in words."""
    for index, json_filter in enumerate(filters, start=1):
        if not json_filter.evaluate(body):
            found = _lookup(body, json_filter.path.split("."))
            actual = "missing" if found is _MISSING else _show(found)
            if json_filter.op == "matches" and isinstance(found, str):
                if len(found) > MAX_SUBJECT_CHARS:
                    actual = (
                        f"{len(found):,} characters long; a regex filter searches at most "
                        f"{MAX_SUBJECT_CHARS:,}"
                    )
            return False, (
                f"filter #{index} ({json_filter.describe()}) did not match: "
                f"{json_filter.path} is {actual}"
            )
    return True, None


def delivery_id(hook: HookConfig, headers: Mapping[str, str]) -> str | None:
    """The sender's delivery id from the first of `hook.id_headers` present, for deduplication.

    An id longer than the column (255) is replaced by `sha256:<hex>` of it: stable, and two
    different ids never collapse into one as a truncation could make them.
    """
    for name in hook.id_headers:
        value = (header_value(headers, name) or "").strip()
        if value:
            if len(value) > MAX_DELIVERY_ID_LENGTH:
                return "sha256:" + hashlib.sha256(value.encode()).hexdigest()
            return value
    return None


def redact_headers(headers: Mapping[str, str], extra: Iterable[str] = ()) -> dict[str, str]:
    """Headers for the delivery log: names lower-cased, credential and signature values redacted.

    Pass the hook's own signature header (`hook.header`) and any other names in `extra`.
    """
    redacted = REDACTED_HEADERS | {name.lower() for name in extra}
    logged: dict[str, str] = {}
    for name, value in headers.items():
        lowered = name.lower()
        secret = lowered in redacted or any(part in lowered for part in REDACTED_NAME_PARTS)
        logged[lowered] = REDACTED if secret else value
    return logged


def _check_count(field: str, values: Sized, limit: int) -> None:
    if len(values) > limit:
        raise ValueError(f"at most {limit} {field}, got {len(values)}")


def _lookup(body: object, segments: list[str]) -> object:
    current = body
    for segment in segments:
        if isinstance(current, dict):
            if segment not in current:
                return _MISSING
            current = current[segment]
        elif isinstance(current, list) and segment.isascii() and segment.isdigit():
            index = int(segment)
            if index >= len(current):
                return _MISSING
            current = current[index]
        else:
            return _MISSING
    return current


def _json_equal(left: object, right: object) -> bool:
    # Python's == says True == 1 and "1" != 1; JSON equality keeps booleans apart from numbers.
    if isinstance(left, bool) or isinstance(right, bool):
        return isinstance(left, bool) and isinstance(right, bool) and left is right
    if isinstance(left, int | float) and isinstance(right, int | float):
        return left == right
    if isinstance(left, list) and isinstance(right, list):
        return len(left) == len(right) and all(map(_json_equal, left, right))
    if isinstance(left, dict) and isinstance(right, dict):
        return left.keys() == right.keys() and all(_json_equal(left[k], right[k]) for k in left)
    return type(left) is type(right) and bool(left == right)


def _contains(container: object, value: object) -> bool:
    if isinstance(container, str):
        return isinstance(value, str) and value in container
    if isinstance(container, list):
        return any(_json_equal(item, value) for item in container)
    if isinstance(container, dict):
        return isinstance(value, str) and value in container
    return False


def _show(value: object) -> str:
    if isinstance(value, str):
        text = repr(value)
    else:
        try:
            text = json.dumps(value, sort_keys=True, default=repr)
        except (TypeError, ValueError):
            text = repr(value)
    return text if len(text) <= _SHOW_LIMIT else text[: _SHOW_LIMIT - 3] + "..."
