"""Webhook signature verification: GitHub's X-Hub-Signature-256 and the custom hook schemes.

Every function here is pure (no I/O, the clock is passed in) and either returns None or raises
`SignatureError`, whose message the endpoint logs and answers with 401. Messages say what was wrong
and what to do, but never echo a secret, a token or a full signature.

Schemes of a custom hook (`HookConfig.scheme`):

- `hmac-sha256`: HMAC-SHA256 of the raw body with one of the hook's secrets (used as UTF-8 bytes),
  in `hook.header`, `hex` or `base64` (standard or URL-safe alphabet, padding optional), after an
  optional `hook.prefix` (matched case-insensitively). No timestamp, so no replay protection: pair
  it with a delivery id header for duplicate detection.
- `standard-webhooks` (https://www.standardwebhooks.com/, Svix's `svix-*` header names accepted):
  `v1,<base64>` signatures of `{id}.{timestamp}.{body}`; secrets are `whsec_<base64>` and the key
  is the decoded base64 part.
- `stripe`: `Stripe-Signature: t=<unix>,v1=<hex>[,v1=<hex>]` over `{t}.{body}`; the secret is used
  as-is (`whsec_...` included), as Stripe's own libraries do.
- `token`: no signature; the token from the URL must equal one of `hook.tokens`.

Timestamped schemes refuse a timestamp further than the tolerance from `now` in either direction
(Stripe's libraries only check the past; a timestamp far in the future is as suspicious).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from pydantic import SecretStr

from ade_tasks.errors import AdeError

GITHUB_HEADER = "X-Hub-Signature-256"
GITHUB_LEGACY_HEADER = "X-Hub-Signature"
STRIPE_HEADER = "Stripe-Signature"
STANDARD_PREFIXES = ("webhook-", "svix-")
DEFAULT_TOLERANCE_SECONDS = 300
STANDARD_SECRET_PREFIX = "whsec_"

_HEX_SHA256 = re.compile(r"[0-9a-fA-F]{64}")
_UNIX_SECONDS = re.compile(r"[0-9]{1,12}")
_MISMATCH = (
    "signature does not match the body: check the secret, and that nothing re-serialized the body"
)


class SignedHook(Protocol):
    """What the checks read of a hook; `ade_tasks.hooks.config.HookConfig` is one (it imports
    this module, so the checks name the fields they need instead of the model)."""

    @property
    def scheme(self) -> str: ...
    @property
    def secrets(self) -> Sequence[SecretStr]: ...
    @property
    def tokens(self) -> Sequence[SecretStr]: ...
    @property
    def header(self) -> str: ...
    @property
    def encoding(self) -> str: ...
    @property
    def prefix(self) -> str: ...
    @property
    def tolerance(self) -> int: ...


class SignatureError(AdeError):
    """The webhook delivery is not authentic: its signature or token did not verify."""


def verify_github(
    secret: bytes, body: bytes, header: str | None, *, legacy_sha1: str | None = None
) -> None:
    """Check GitHub's `X-Hub-Signature-256: sha256=<hex>` against the raw body."""
    if not secret:
        # An empty key is one every sender knows: refuse rather than "verify".
        raise SignatureError(
            "no GitHub webhook secret is configured: set ADE_GITHUB__WEBHOOK_SECRET and the same "
            "secret on the webhook"
        )
    value = (header or "").strip()
    if not value or value.lower().startswith("sha1="):
        if value or (legacy_sha1 or "").strip().lower().startswith("sha1="):
            raise SignatureError(
                "only sha1= was sent; configure the webhook's secret so GitHub sends sha256="
            )
        raise SignatureError(
            f"{GITHUB_HEADER} is missing; GitHub sends it when the webhook has a secret: set the "
            "same secret as ADE_GITHUB__WEBHOOK_SECRET"
        )
    scheme, _, given = value.partition("=")
    if scheme.lower() != "sha256" or not _HEX_SHA256.fullmatch(given):
        raise SignatureError(
            f"{GITHUB_HEADER} is malformed: expected sha256= and 64 hex digits, got "
            f"{len(value)} characters"
        )
    expected = hmac.new(secret, body, hashlib.sha256).digest()
    if not hmac.compare_digest(expected, bytes.fromhex(given)):
        raise SignatureError(_MISMATCH)


def verify_hmac_sha256(
    hook: SignedHook,
    body: bytes,
    headers: Mapping[str, str],
    now: datetime,  # noqa: ARG001 - every scheme takes the same arguments
) -> None:
    """Check an HMAC-SHA256 of the raw body in `hook.header` against any of the hook's secrets."""
    value = header_value(headers, hook.header)
    if value is None or not value.strip():
        raise SignatureError(
            f"{hook.header} is missing: the sender must sign each delivery with the hook's secret "
            "(scheme hmac-sha256)"
        )
    value = value.strip()
    if hook.prefix:
        if not value.lower().startswith(hook.prefix.lower()):
            raise SignatureError(
                f"{hook.header} does not start with the configured prefix {hook.prefix!r}"
            )
        value = value[len(hook.prefix) :]
    given = _decode_hex(value) if hook.encoding == "hex" else _decode_base64(value)
    if given is None or len(given) != hashlib.sha256().digest_size:
        raise SignatureError(
            f"{hook.header} is malformed: expected {hook.prefix}<{hook.encoding} HMAC-SHA256> "
            f"(32 bytes), got {len(value)} characters"
        )
    keys = [secret.get_secret_value().encode() for secret in hook.secrets]
    _match_any(keys, body, [given])


def verify_standard_webhooks(
    hook: SignedHook, body: bytes, headers: Mapping[str, str], now: datetime
) -> None:
    """Check a Standard Webhooks (or Svix) delivery: timestamp within tolerance, v1 signature."""
    parts = _standard_parts(headers)
    _check_skew(parts.timestamp, now, hook.tolerance, parts.timestamp_header)
    signatures = []
    for entry in parts.signature.split():
        version, _, encoded = entry.partition(",")
        # Other versions (v1a is asymmetric) are not ours to check; a sender may list several.
        if version == "v1":
            decoded = _decode_base64(encoded)
            if decoded is not None:
                signatures.append(decoded)
    if not signatures:
        raise SignatureError(
            f"{parts.signature_header} carries no valid v1,<base64> signature "
            "(only symmetric v1 signatures are supported)"
        )
    signed = f"{parts.msg_id}.{parts.timestamp_raw}.".encode() + body
    keys = [standard_webhooks_key(secret.get_secret_value()) for secret in hook.secrets]
    _match_any(keys, signed, signatures)


def verify_stripe(hook: SignedHook, body: bytes, headers: Mapping[str, str], now: datetime) -> None:
    """Check `Stripe-Signature: t=...,v1=...` with the timestamp within the hook's tolerance."""
    timestamp_raw, timestamp, signatures = _stripe_parts(headers)
    _check_skew(timestamp, now, hook.tolerance, f"{STRIPE_HEADER} t=")
    given = [decoded for hex_value in signatures if (decoded := _decode_hex(hex_value)) is not None]
    if not given:
        raise SignatureError(f"{STRIPE_HEADER} carries no valid v1=<hex> signature")
    signed = f"{timestamp_raw}.".encode() + body
    keys = [secret.get_secret_value().encode() for secret in hook.secrets]
    _match_any(keys, signed, given)


def verify_token(hook: SignedHook, token: str | None) -> None:
    """Check the token from the hook URL against every one of the hook's tokens."""
    if not token:
        raise SignatureError(
            "the hook token is missing: call the hook's URL with its token (?token=...)"
        )
    given = token.encode()
    matched = False
    # No early exit: every configured token is compared, whichever one matches.
    for candidate in hook.tokens:
        matched |= hmac.compare_digest(candidate.get_secret_value().encode(), given)
    if not matched:
        raise SignatureError("the hook token does not match any of the hook's tokens")


SchemeVerifier = Callable[[SignedHook, bytes, Mapping[str, str], datetime], None]

#: The signature check of each scheme that signs the body (`token` signs nothing).
SIGNATURE_SCHEMES: dict[str, SchemeVerifier] = {
    "hmac-sha256": verify_hmac_sha256,
    "standard-webhooks": verify_standard_webhooks,
    "stripe": verify_stripe,
}


def verify_hook(
    hook: SignedHook, body: bytes, headers: Mapping[str, str], now: datetime, token: str | None
) -> None:
    """Authenticate a custom-hook delivery: its URL token (if the hook has any), then its scheme."""
    _require_aware(now)
    # Tokens are checked whatever the scheme: with a signing scheme they are an extra gate.
    if hook.tokens or hook.scheme == "token":
        verify_token(hook, token)
    verifier = SIGNATURE_SCHEMES.get(hook.scheme)
    if verifier is not None:
        verifier(hook, body, headers, now)


def timestamp_age_ok(hook: SignedHook, headers: Mapping[str, str], now: datetime) -> None:
    """Refuse a delivery whose signed timestamp is outside the hook's tolerance (if it has one).

    Cheap, so the endpoint runs it before the HMAC; the scheme's verifier checks it again.
    """
    _require_aware(now)
    if hook.scheme == "standard-webhooks":
        parts = _standard_parts(headers)
        _check_skew(parts.timestamp, now, hook.tolerance, parts.timestamp_header)
    elif hook.scheme == "stripe":
        _, timestamp, _ = _stripe_parts(headers)
        _check_skew(timestamp, now, hook.tolerance, f"{STRIPE_HEADER} t=")


def standard_webhooks_key(secret: str) -> bytes:
    """Key bytes of a Standard Webhooks secret `whsec_<base64>`; ValueError if it is not one."""
    encoded = secret.strip().removeprefix(STANDARD_SECRET_PREFIX)
    try:
        key = base64.b64decode(encoded, validate=True)
    except binascii.Error:
        raise ValueError("expected whsec_ followed by base64") from None
    if not key:
        raise ValueError("expected whsec_ followed by base64, got no key bytes")
    return key


def header_value(headers: Mapping[str, str], name: str) -> str | None:
    """The value of header `name`, matched case-insensitively even in a plain dict."""
    value = headers.get(name)
    if value is not None:
        return value
    lowered = name.lower()
    for key, candidate in headers.items():
        if key.lower() == lowered:
            return candidate
    return None


@dataclass(frozen=True, slots=True)
class _StandardParts:
    msg_id: str
    timestamp_raw: str
    timestamp: int
    signature: str
    timestamp_header: str
    signature_header: str


def _standard_parts(headers: Mapping[str, str]) -> _StandardParts:
    # One header family per delivery: webhook-* if the sender used it, otherwise svix-*.
    prefix = next(
        (p for p in STANDARD_PREFIXES if header_value(headers, f"{p}signature") is not None),
        STANDARD_PREFIXES[0],
    )
    names = [f"{prefix}id", f"{prefix}timestamp", f"{prefix}signature"]
    values = [(header_value(headers, name) or "").strip() for name in names]
    missing = [name for name, value in zip(names, values, strict=True) if not value]
    if missing:
        raise SignatureError(
            f"{', '.join(missing)} missing: Standard Webhooks deliveries carry webhook-id, "
            "webhook-timestamp and webhook-signature (or svix-id, svix-timestamp, svix-signature)"
        )
    msg_id, timestamp_raw, signature = values
    return _StandardParts(
        msg_id=msg_id,
        timestamp_raw=timestamp_raw,
        timestamp=_parse_unix(timestamp_raw, names[1]),
        signature=signature,
        timestamp_header=names[1],
        signature_header=names[2],
    )


def _stripe_parts(headers: Mapping[str, str]) -> tuple[str, int, list[str]]:
    value = header_value(headers, STRIPE_HEADER)
    if value is None or not value.strip():
        raise SignatureError(f"{STRIPE_HEADER} is missing: Stripe signs every webhook delivery")
    timestamp_raw: str | None = None
    signatures: list[str] = []
    for piece in value.split(","):
        key, _, item = piece.strip().partition("=")
        # The first t= counts, as in Stripe's libraries; v0 (test-mode legacy) is ignored.
        if key == "t" and timestamp_raw is None:
            timestamp_raw = item.strip()
        elif key == "v1":
            signatures.append(item.strip())
    if timestamp_raw is None or not signatures:
        raise SignatureError(f"{STRIPE_HEADER} is malformed: expected t=<unix>,v1=<hex>")
    return timestamp_raw, _parse_unix(timestamp_raw, f"{STRIPE_HEADER} t="), signatures


def _parse_unix(value: str, where: str) -> int:
    if not _UNIX_SECONDS.fullmatch(value):
        raise SignatureError(f"{where} is not a unix timestamp in seconds")
    return int(value)


def _check_skew(sent: int, now: datetime, tolerance: int, where: str) -> None:
    skew = now.timestamp() - sent
    if abs(skew) > tolerance:
        direction = "in the past" if skew > 0 else "in the future"
        raise SignatureError(
            f"{where} is {abs(skew):.0f} s {direction}, beyond the tolerance of {tolerance} s: "
            "check the clocks of the sender and of this host (a replayed delivery looks the same)"
        )


def _match_any(keys: list[bytes], signed: bytes, given: list[bytes]) -> None:
    matched = False
    # Every key against every signature, no early exit: rotation must not leak which key is live.
    for key in keys:
        expected = hmac.new(key, signed, hashlib.sha256).digest()
        for signature in given:
            matched |= hmac.compare_digest(expected, signature)
    if not matched:
        raise SignatureError(_MISMATCH)


def _decode_hex(value: str) -> bytes | None:
    return bytes.fromhex(value) if _HEX_SHA256.fullmatch(value) else None


def _decode_base64(value: str) -> bytes | None:
    # Senders differ in alphabet and padding; both decode to the same 32 bytes.
    normalized = value.strip().translate(str.maketrans("-_", "+/")).rstrip("=")
    normalized += "=" * (-len(normalized) % 4)
    try:
        return base64.b64decode(normalized, validate=True)
    except binascii.Error:
        return None


def _require_aware(now: datetime) -> None:
    if now.tzinfo is None or now.utcoffset() is None:
        raise ValueError("now must be a timezone-aware datetime (UTC)")
