"""Webhook signature verification: GitHub, hmac-sha256, Standard Webhooks, Stripe and tokens.

Every expected signature is computed here with hmac/hashlib, independently of the module under test.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from ade_tasks.errors import AdeError
from ade_tasks.hooks.config import HookConfig
from ade_tasks.hooks.signatures import (
    SignatureError,
    timestamp_age_ok,
    verify_github,
    verify_hmac_sha256,
    verify_hook,
    verify_standard_webhooks,
    verify_stripe,
    verify_token,
)

NOW = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
GITHUB_SECRET = b"It's a Secret to Everybody"
GITHUB_BODY = b"Hello, World!"
GITHUB_VECTOR = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
BODY = b'{"action": "opened", "number": 7}'
# Standard Webhooks' own example secret; the key is the base64-decoded part after whsec_.
WH_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
WH_SECRET_2 = "whsec_" + base64.b64encode(b"second-key-for-rotation!").decode()
STRIPE_SECRET = "whsec_test_stripe_secret"


def hex_hmac(key: bytes, message: bytes) -> str:
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def b64_hmac(key: bytes, message: bytes) -> str:
    return base64.b64encode(hmac.new(key, message, hashlib.sha256).digest()).decode()


def standard_key(secret: str) -> bytes:
    return base64.b64decode(secret.removeprefix("whsec_"))


def standard_headers(
    body: bytes,
    *,
    secret: str = WH_SECRET,
    at: datetime = NOW,
    msg_id: str = "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W",
    prefix: str = "webhook-",
) -> dict[str, str]:
    timestamp = str(int(at.timestamp()))
    signature = b64_hmac(standard_key(secret), f"{msg_id}.{timestamp}.".encode() + body)
    return {
        f"{prefix}id": msg_id,
        f"{prefix}timestamp": timestamp,
        f"{prefix}signature": f"v1,{signature}",
    }


def stripe_header(body: bytes, *, secret: str = STRIPE_SECRET, at: datetime = NOW) -> str:
    timestamp = str(int(at.timestamp()))
    return f"t={timestamp},v1={hex_hmac(secret.encode(), f'{timestamp}.'.encode() + body)}"


def hook(**fields: Any) -> HookConfig:
    return HookConfig.model_validate(fields)


# --- GitHub -------------------------------------------------------------------------------------


def test_github_documented_test_vector_verifies() -> None:
    verify_github(GITHUB_SECRET, GITHUB_BODY, GITHUB_VECTOR)


def test_github_signature_computed_here_verifies() -> None:
    header = "sha256=" + hex_hmac(b"s3cret", BODY)
    verify_github(b"s3cret", BODY, header)


def test_github_wrong_secret_is_refused() -> None:
    with pytest.raises(SignatureError, match="does not match the body"):
        verify_github(b"another secret", GITHUB_BODY, GITHUB_VECTOR)


def test_github_missing_header_names_the_setting() -> None:
    with pytest.raises(SignatureError, match="X-Hub-Signature-256 is missing") as caught:
        verify_github(GITHUB_SECRET, GITHUB_BODY, None)
    assert "ADE_GITHUB__WEBHOOK_SECRET" in caught.value.message
    assert isinstance(caught.value, AdeError)


def test_github_only_sha1_is_refused() -> None:
    legacy = "sha1=" + hmac.new(GITHUB_SECRET, GITHUB_BODY, hashlib.sha1).hexdigest()
    with pytest.raises(SignatureError, match="only sha1= was sent"):
        verify_github(GITHUB_SECRET, GITHUB_BODY, None, legacy_sha1=legacy)


def test_github_sha1_in_the_sha256_header_is_refused() -> None:
    legacy = "sha1=" + hmac.new(GITHUB_SECRET, GITHUB_BODY, hashlib.sha1).hexdigest()
    with pytest.raises(SignatureError, match="only sha1= was sent"):
        verify_github(GITHUB_SECRET, GITHUB_BODY, legacy)


def test_github_truncated_signature_is_refused_without_echoing_it() -> None:
    truncated = GITHUB_VECTOR[:-2]
    with pytest.raises(SignatureError, match="malformed") as caught:
        verify_github(GITHUB_SECRET, GITHUB_BODY, truncated)
    assert truncated.removeprefix("sha256=") not in caught.value.message


def test_github_non_hex_signature_is_refused() -> None:
    with pytest.raises(SignatureError, match="malformed"):
        verify_github(GITHUB_SECRET, GITHUB_BODY, "sha256=" + "z" * 64)


def test_github_body_changed_after_signing_is_refused() -> None:
    tampered = b"Hello, World?"
    with pytest.raises(SignatureError, match="does not match"):
        verify_github(GITHUB_SECRET, tampered, GITHUB_VECTOR)


def test_github_reserialized_json_body_is_refused() -> None:
    # Given a body signed as GitHub sent it (compact JSON)
    raw = b'{"action":"opened","pull_request":{"number":7}}'
    header = "sha256=" + hex_hmac(GITHUB_SECRET, raw)
    # When something parsed and re-dumped it before verification
    reserialized = json.dumps(json.loads(raw)).encode()
    assert reserialized != raw
    # Then the signature no longer verifies
    with pytest.raises(SignatureError, match="re-serialized"):
        verify_github(GITHUB_SECRET, reserialized, header)


def test_github_empty_secret_is_refused() -> None:
    header = "sha256=" + hex_hmac(b"", BODY)
    with pytest.raises(SignatureError, match="no GitHub webhook secret"):
        verify_github(b"", BODY, header)


def test_github_error_messages_never_echo_the_secret() -> None:
    with pytest.raises(SignatureError) as caught:
        verify_github(GITHUB_SECRET, b"other", GITHUB_VECTOR)
    assert "Secret to Everybody" not in caught.value.message
    assert GITHUB_VECTOR[7:] not in caught.value.message


# --- hmac-sha256 --------------------------------------------------------------------------------


def test_hmac_hex_default_header_verifies() -> None:
    config = hook(scheme="hmac-sha256", secrets=["k1"])
    verify_hmac_sha256(config, BODY, {"X-Signature-256": hex_hmac(b"k1", BODY)}, NOW)


def test_hmac_base64_with_prefix_and_custom_header_verifies() -> None:
    config = hook(
        scheme="hmac-sha256",
        secrets=["k1"],
        header="X-Acme-Sig",
        encoding="base64",
        prefix="sha256=",
    )
    headers = {"x-acme-sig": "sha256=" + b64_hmac(b"k1", BODY)}
    verify_hmac_sha256(config, BODY, headers, NOW)


def test_hmac_hex_with_prefix_verifies() -> None:
    config = hook(scheme="hmac-sha256", secrets=["k1"], prefix="sha256=")
    verify_hmac_sha256(config, BODY, {"X-Signature-256": "sha256=" + hex_hmac(b"k1", BODY)}, NOW)


def test_hmac_missing_prefix_is_refused() -> None:
    config = hook(scheme="hmac-sha256", secrets=["k1"], prefix="sha256=")
    with pytest.raises(SignatureError, match="prefix"):
        verify_hmac_sha256(config, BODY, {"X-Signature-256": hex_hmac(b"k1", BODY)}, NOW)


def test_hmac_second_secret_verifies_during_rotation() -> None:
    config = hook(scheme="hmac-sha256", secrets=["old-key", "new-key"])
    verify_hmac_sha256(config, BODY, {"X-Signature-256": hex_hmac(b"new-key", BODY)}, NOW)


def test_hmac_wrong_secret_is_refused() -> None:
    config = hook(scheme="hmac-sha256", secrets=["k1", "k2"])
    with pytest.raises(SignatureError, match="does not match"):
        verify_hmac_sha256(config, BODY, {"X-Signature-256": hex_hmac(b"k3", BODY)}, NOW)


def test_hmac_missing_header_is_refused() -> None:
    config = hook(scheme="hmac-sha256", secrets=["k1"], header="X-Acme-Sig")
    with pytest.raises(SignatureError, match="X-Acme-Sig is missing"):
        verify_hmac_sha256(config, BODY, {"X-Signature-256": hex_hmac(b"k1", BODY)}, NOW)


def test_hmac_truncated_signature_is_refused() -> None:
    config = hook(scheme="hmac-sha256", secrets=["k1"], encoding="base64")
    truncated = b64_hmac(b"k1", BODY)[:20]
    with pytest.raises(SignatureError, match="malformed"):
        verify_hmac_sha256(config, BODY, {"X-Signature-256": truncated}, NOW)


def test_hmac_body_changed_by_one_byte_is_refused() -> None:
    config = hook(scheme="hmac-sha256", secrets=["k1"])
    header = hex_hmac(b"k1", BODY)
    tampered = BODY.replace(b"7", b"8")
    with pytest.raises(SignatureError, match="does not match"):
        verify_hmac_sha256(config, tampered, {"X-Signature-256": header}, NOW)


# --- Standard Webhooks --------------------------------------------------------------------------


def test_standard_webhooks_correct_signature_verifies() -> None:
    config = hook(scheme="standard-webhooks", secrets=[WH_SECRET])
    verify_standard_webhooks(config, BODY, standard_headers(BODY), NOW)


def test_standard_webhooks_published_svix_vector_verifies() -> None:
    # The example of Svix's (the reference implementation's) own test suites.
    config = hook(scheme="standard-webhooks", secrets=[WH_SECRET])
    headers = {
        "webhook-id": "msg_p5jXN8AQM9LWM0D4loKWxJek",
        "webhook-timestamp": "1614265330",
        "webhook-signature": "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
    }
    sent_at = datetime.fromtimestamp(1614265330, UTC)
    verify_standard_webhooks(config, b'{"test": 2432232314}', headers, sent_at)


def test_standard_webhooks_one_of_several_signatures_matches() -> None:
    config = hook(scheme="standard-webhooks", secrets=[WH_SECRET])
    headers = standard_headers(BODY)
    bogus = base64.b64encode(b"x" * 32).decode()
    headers["webhook-signature"] = f"v1,{bogus} v1a,ignored {headers['webhook-signature']}"
    verify_standard_webhooks(config, BODY, headers, NOW)


def test_standard_webhooks_rotated_secret_verifies() -> None:
    config = hook(scheme="standard-webhooks", secrets=[WH_SECRET, WH_SECRET_2])
    verify_standard_webhooks(config, BODY, standard_headers(BODY, secret=WH_SECRET_2), NOW)


def test_standard_webhooks_wrong_secret_is_refused() -> None:
    config = hook(scheme="standard-webhooks", secrets=[WH_SECRET])
    with pytest.raises(SignatureError, match="does not match"):
        verify_standard_webhooks(config, BODY, standard_headers(BODY, secret=WH_SECRET_2), NOW)


@pytest.mark.parametrize(
    ("offset", "direction"),
    [(timedelta(minutes=-6), "in the past"), (timedelta(minutes=6), "in the future")],
)
def test_standard_webhooks_timestamp_six_minutes_off_is_refused(
    offset: timedelta, direction: str
) -> None:
    config = hook(scheme="standard-webhooks", secrets=[WH_SECRET])
    headers = standard_headers(BODY, at=NOW + offset)
    with pytest.raises(SignatureError, match=f"360 s {direction}"):
        verify_standard_webhooks(config, BODY, headers, NOW)


@pytest.mark.parametrize("offset", [timedelta(minutes=-4), timedelta(minutes=4)])
def test_standard_webhooks_timestamp_four_minutes_off_verifies(offset: timedelta) -> None:
    config = hook(scheme="standard-webhooks", secrets=[WH_SECRET])
    verify_standard_webhooks(config, BODY, standard_headers(BODY, at=NOW + offset), NOW)


def test_standard_webhooks_svix_header_names_verify() -> None:
    config = hook(scheme="standard-webhooks", secrets=[WH_SECRET])
    headers = standard_headers(BODY, prefix="svix-")
    verify_standard_webhooks(config, BODY, headers, NOW)


def test_standard_webhooks_missing_headers_are_named() -> None:
    config = hook(scheme="standard-webhooks", secrets=[WH_SECRET])
    headers = standard_headers(BODY)
    del headers["webhook-timestamp"]
    with pytest.raises(SignatureError, match="webhook-timestamp missing"):
        verify_standard_webhooks(config, BODY, headers, NOW)


def test_standard_webhooks_signed_id_cannot_be_swapped() -> None:
    config = hook(scheme="standard-webhooks", secrets=[WH_SECRET])
    headers = standard_headers(BODY)
    headers["webhook-id"] = "msg_other"
    with pytest.raises(SignatureError, match="does not match"):
        verify_standard_webhooks(config, BODY, headers, NOW)


def test_standard_webhooks_custom_tolerance_applies() -> None:
    config = hook(scheme="standard-webhooks", secrets=[WH_SECRET], tolerance_seconds=60)
    headers = standard_headers(BODY, at=NOW - timedelta(seconds=90))
    with pytest.raises(SignatureError, match="tolerance of 60 s"):
        verify_standard_webhooks(config, BODY, headers, NOW)


# --- Stripe -------------------------------------------------------------------------------------


def test_stripe_valid_signature_verifies() -> None:
    config = hook(scheme="stripe", secrets=[STRIPE_SECRET])
    verify_stripe(config, BODY, {"Stripe-Signature": stripe_header(BODY)}, NOW)


def test_stripe_tolerance_exceeded_is_refused() -> None:
    config = hook(scheme="stripe", secrets=[STRIPE_SECRET])
    header = stripe_header(BODY, at=NOW - timedelta(seconds=301))
    with pytest.raises(SignatureError, match="301 s in the past"):
        verify_stripe(config, BODY, {"Stripe-Signature": header}, NOW)


def test_stripe_multiple_v1_signatures_one_matches() -> None:
    config = hook(scheme="stripe", secrets=[STRIPE_SECRET])
    header = stripe_header(BODY)
    timestamp, valid = header.split(",")
    header = f"{timestamp},v1={'0' * 64},{valid},v0={'1' * 64}"
    verify_stripe(config, BODY, {"stripe-signature": header}, NOW)


def test_stripe_wrong_secret_is_refused() -> None:
    config = hook(scheme="stripe", secrets=[STRIPE_SECRET])
    header = stripe_header(BODY, secret="whsec_other")
    with pytest.raises(SignatureError, match="does not match"):
        verify_stripe(config, BODY, {"Stripe-Signature": header}, NOW)


def test_stripe_header_without_v1_is_refused() -> None:
    config = hook(scheme="stripe", secrets=[STRIPE_SECRET])
    with pytest.raises(SignatureError, match="malformed"):
        verify_stripe(config, BODY, {"Stripe-Signature": f"t={int(NOW.timestamp())}"}, NOW)


# --- tokens -------------------------------------------------------------------------------------


def test_token_match_is_accepted() -> None:
    verify_token(hook(scheme="token", tokens=["tok-123"]), "tok-123")


def test_token_mismatch_is_refused() -> None:
    with pytest.raises(SignatureError, match="does not match") as caught:
        verify_token(hook(scheme="token", tokens=["tok-123"]), "tok-124")
    assert "tok-12" not in caught.value.message


def test_token_missing_is_refused() -> None:
    with pytest.raises(SignatureError, match="token is missing"):
        verify_token(hook(scheme="token", tokens=["tok-123"]), None)


def test_token_rotation_accepts_either_token() -> None:
    config = hook(scheme="token", tokens=["old-token", "new-token"])
    verify_token(config, "old-token")
    verify_token(config, "new-token")


# --- verify_hook and the age check --------------------------------------------------------------


def test_verify_hook_dispatches_on_scheme() -> None:
    verify_hook(
        hook(scheme="stripe", secrets=[STRIPE_SECRET]),
        BODY,
        {"Stripe-Signature": stripe_header(BODY)},
        NOW,
        None,
    )
    verify_hook(hook(scheme="token", tokens=["t"]), BODY, {}, NOW, "t")


def test_verify_hook_checks_tokens_as_well_as_signatures() -> None:
    config = hook(scheme="hmac-sha256", secrets=["k1"], tokens=["url-token"])
    headers = {"X-Signature-256": hex_hmac(b"k1", BODY)}
    verify_hook(config, BODY, headers, NOW, "url-token")
    with pytest.raises(SignatureError, match="token"):
        verify_hook(config, BODY, headers, NOW, "wrong")


def test_verify_hook_refuses_a_naive_clock() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        verify_hook(hook(scheme="token", tokens=["t"]), BODY, {}, datetime(2025, 1, 1), "t")


def test_timestamp_age_ok_runs_before_any_hmac() -> None:
    # Given a stale delivery whose signature is garbage: the age check alone refuses it
    config = hook(scheme="standard-webhooks", secrets=[WH_SECRET])
    headers = standard_headers(BODY, at=NOW - timedelta(minutes=10))
    headers["webhook-signature"] = "v1,garbage"
    with pytest.raises(SignatureError, match="600 s in the past"):
        timestamp_age_ok(config, headers, NOW)


def test_timestamp_age_ok_accepts_fresh_and_untimed_schemes() -> None:
    timestamp_age_ok(
        hook(scheme="stripe", secrets=[STRIPE_SECRET]),
        {"Stripe-Signature": stripe_header(BODY, at=NOW + timedelta(seconds=30))},
        NOW,
    )
    timestamp_age_ok(hook(scheme="hmac-sha256", secrets=["k"]), {}, NOW)
