"""Custom webhook configuration: validation, JSON filters, delivery ids and header redaction."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from ade_tasks.hooks.config import (
    CHECK_ORDER,
    HookConfig,
    JsonFilter,
    delivery_id,
    filters_match,
    redact_headers,
)

PAYLOAD: dict[str, Any] = {
    "action": "opened",
    "number": 7,
    "draft": False,
    "merged_at": None,
    "labels": ["bug", "ui"],
    "pull_request": {"title": "WIP: login", "base": {"ref": "main"}, "head": {"ref": "fix/1"}},
    "commits": [{"id": "abc123", "message": "first"}, {"id": "def456", "message": "second"}],
}


def make_filter(**fields: Any) -> JsonFilter:
    return JsonFilter.model_validate(fields)


def errors_of(fields: dict[str, Any]) -> list[tuple[str, str]]:
    with pytest.raises(ValidationError) as caught:
        HookConfig.model_validate(fields)
    return [(".".join(map(str, e["loc"])), e["msg"]) for e in caught.value.errors()]


# --- HookConfig ---------------------------------------------------------------------------------


def test_hook_defaults() -> None:
    config = HookConfig.model_validate({"scheme": "hmac-sha256", "secrets": ["k"]})
    assert config.header == "X-Signature-256"
    assert config.encoding == "hex"
    assert config.max_body_bytes == 1_048_576
    assert config.rate_per_minute == 60
    assert config.tolerance == 300
    assert config.id_headers[0] == "X-GitHub-Delivery"


def test_hook_secrets_are_hidden_in_repr() -> None:
    config = HookConfig.model_validate({"scheme": "hmac-sha256", "secrets": ["hunter2"]})
    assert "hunter2" not in repr(config)


def test_hmac_hook_without_secrets_is_refused_naming_the_field() -> None:
    [(field, message)] = errors_of({"scheme": "hmac-sha256"})
    assert field == "secrets"
    assert "needs at least one secret" in message


def test_token_hook_without_tokens_is_refused() -> None:
    [(field, message)] = errors_of({"scheme": "token"})
    assert field == "tokens"
    assert "at least one token" in message


def test_token_hook_with_secrets_is_refused() -> None:
    [(field, _)] = errors_of({"scheme": "token", "tokens": ["t"], "secrets": ["s"]})
    assert field == "secrets"


def test_token_hook_error_does_not_echo_the_secret() -> None:
    with pytest.raises(ValidationError) as caught:
        HookConfig.model_validate({"scheme": "token", "tokens": ["t"], "secrets": ["hunter2"]})
    assert "hunter2" not in str(caught.value)


def test_twenty_one_filters_are_refused_with_a_clear_error() -> None:
    filters = [{"path": f"k{i}", "op": "exists"} for i in range(21)]
    [(field, message)] = errors_of({"scheme": "hmac-sha256", "secrets": ["k"], "filters": filters})
    assert field == "filters"
    assert "at most 20 filters per hook, got 21" in message


def test_twenty_filters_are_allowed() -> None:
    filters = [{"path": f"k{i}", "op": "exists"} for i in range(20)]
    HookConfig.model_validate({"scheme": "hmac-sha256", "secrets": ["k"], "filters": filters})


def test_bad_regex_is_refused_at_validation() -> None:
    filters = [{"path": "title", "op": "matches", "value": "(unclosed"}]
    [(field, message)] = errors_of({"scheme": "hmac-sha256", "secrets": ["k"], "filters": filters})
    assert field.startswith("filters.0")
    assert "not a valid regular expression" in message


@pytest.mark.parametrize("size", [1023, 25 * 1024 * 1024 + 1, 0])
def test_body_size_outside_1kib_25mib_is_refused(size: int) -> None:
    [(field, message)] = errors_of(
        {"scheme": "hmac-sha256", "secrets": ["k"], "max_body_bytes": size}
    )
    assert field == "max_body_bytes"
    assert "1 KiB" in message and "25 MiB" in message


@pytest.mark.parametrize("rate", [0, 100_001])
def test_rate_outside_bounds_is_refused(rate: int) -> None:
    [(field, _)] = errors_of({"scheme": "hmac-sha256", "secrets": ["k"], "rate_per_minute": rate})
    assert field == "rate_per_minute"


def test_unknown_field_is_refused() -> None:
    [(field, _)] = errors_of({"scheme": "hmac-sha256", "secrets": ["k"], "secret": "k"})
    assert field == "secret"


def test_unknown_scheme_is_refused() -> None:
    fields = [field for field, _ in errors_of({"scheme": "md5", "secrets": ["k"]})]
    assert fields == ["scheme"]


def test_standard_webhooks_secret_must_be_base64() -> None:
    [(field, message)] = errors_of(
        {"scheme": "standard-webhooks", "secrets": ["whsec_not base64!"]}
    )
    assert field == "secrets"
    assert "not a Standard Webhooks secret" in message


def test_tolerance_on_a_scheme_without_timestamp_is_refused() -> None:
    [(field, _)] = errors_of({"scheme": "hmac-sha256", "secrets": ["k"], "tolerance_seconds": 60})
    assert field == "tolerance_seconds"


def test_hmac_only_fields_on_another_scheme_are_refused() -> None:
    [(_, message)] = errors_of({"scheme": "stripe", "secrets": ["k"], "prefix": "sha256="})
    assert message.startswith("Value error, prefix:")


def test_bad_header_name_is_refused() -> None:
    [(field, _)] = errors_of({"scheme": "hmac-sha256", "secrets": ["k"], "header": "X Sig"})
    assert field == "header"


def test_check_order_runs_the_cheap_checks_before_the_signature() -> None:
    assert CHECK_ORDER.index("age") < CHECK_ORDER.index("signature")
    assert CHECK_ORDER.index("signature") < CHECK_ORDER.index("filters")
    assert CHECK_ORDER[0] == "token"


# --- JsonFilter validation ----------------------------------------------------------------------


def test_filter_value_is_required_except_for_exists() -> None:
    with pytest.raises(ValidationError, match="op equals needs a value"):
        make_filter(path="action", op="equals")
    assert make_filter(path="action", op="exists").value is True


def test_filter_exists_value_must_be_bool() -> None:
    with pytest.raises(ValidationError, match="true or false"):
        make_filter(path="action", op="exists", value="yes")


def test_filter_matches_value_must_be_a_string() -> None:
    with pytest.raises(ValidationError, match="regex string"):
        make_filter(path="number", op="matches", value=7)


def test_filter_path_with_an_empty_segment_is_refused() -> None:
    with pytest.raises(ValidationError, match="empty segment"):
        make_filter(path="pull_request..ref", op="exists")


# --- JsonFilter semantics -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"path": "action", "op": "equals", "value": "opened"}, True),
        ({"path": "action", "op": "equals", "value": "closed"}, False),
        ({"path": "pull_request.base.ref", "op": "equals", "value": "main"}, True),
        ({"path": "commits.1.id", "op": "equals", "value": "def456"}, True),
        ({"path": "number", "op": "equals", "value": 7.0}, True),
        ({"path": "number", "op": "equals", "value": "7"}, False),
        ({"path": "draft", "op": "equals", "value": 0}, False),
        ({"path": "draft", "op": "equals", "value": False}, True),
        ({"path": "merged_at", "op": "equals", "value": None}, True),
        ({"path": "labels", "op": "equals", "value": ["bug", "ui"]}, True),
        ({"path": "missing.path", "op": "equals", "value": None}, False),
        ({"path": "action", "op": "not_equals", "value": "closed"}, True),
        ({"path": "action", "op": "not_equals", "value": "opened"}, False),
        ({"path": "missing", "op": "not_equals", "value": "opened"}, True),
        ({"path": "pull_request.title", "op": "contains", "value": "login"}, True),
        ({"path": "pull_request.title", "op": "contains", "value": "logout"}, False),
        ({"path": "labels", "op": "contains", "value": "bug"}, True),
        ({"path": "labels", "op": "contains", "value": "feature"}, False),
        ({"path": "pull_request", "op": "contains", "value": "base"}, True),
        ({"path": "pull_request", "op": "contains", "value": "merged"}, False),
        ({"path": "number", "op": "contains", "value": "7"}, False),
        ({"path": "missing", "op": "contains", "value": "x"}, False),
        ({"path": "pull_request.head", "op": "exists"}, True),
        ({"path": "pull_request.milestone", "op": "exists"}, False),
        ({"path": "merged_at", "op": "exists"}, False),
        ({"path": "merged_at", "op": "exists", "value": False}, True),
        ({"path": "action", "op": "exists", "value": False}, False),
        ({"path": "commits.5.id", "op": "exists"}, False),
        ({"path": "pull_request.title", "op": "matches", "value": "^WIP"}, True),
        ({"path": "pull_request.title", "op": "matches", "value": "^Fix"}, False),
        ({"path": "number", "op": "matches", "value": "7"}, False),
        ({"path": "missing", "op": "matches", "value": ".*"}, False),
    ],
)
def test_filter_ops(fields: dict[str, Any], expected: bool) -> None:
    assert make_filter(**fields).evaluate(PAYLOAD) is expected


def test_filter_on_a_non_object_body_treats_paths_as_missing() -> None:
    assert make_filter(path="action", op="not_equals", value="x").evaluate("text") is True
    assert make_filter(path="0", op="equals", value=1).evaluate([1, 2]) is True
    assert make_filter(path="action", op="exists").evaluate(None) is False


def test_filters_match_all_pass() -> None:
    filters = [
        make_filter(path="action", op="equals", value="opened"),
        make_filter(path="labels", op="contains", value="bug"),
    ]
    assert filters_match(filters, PAYLOAD) == (True, None)


def test_filters_match_no_filters_admits_everything() -> None:
    assert filters_match([], PAYLOAD) == (True, None)


def test_filters_match_describes_the_first_failure() -> None:
    filters = [
        make_filter(path="number", op="exists"),
        make_filter(path="action", op="equals", value="opened"),
        make_filter(path="draft", op="equals", value=True),
    ]
    closed = {**PAYLOAD, "action": "closed"}
    assert filters_match(filters, closed) == (
        False,
        "filter #2 (action equals 'opened') did not match: action is 'closed'",
    )


def test_filters_match_describes_a_missing_path() -> None:
    filters = [make_filter(path="pull_request.merged_by.login", op="exists")]
    ok, reason = filters_match(filters, PAYLOAD)
    assert not ok
    assert reason == (
        "filter #1 (pull_request.merged_by.login exists) did not match: "
        "pull_request.merged_by.login is missing"
    )


# --- delivery ids -------------------------------------------------------------------------------


def test_delivery_id_first_configured_header_present_wins() -> None:
    config = HookConfig.model_validate({"scheme": "token", "tokens": ["t"]})
    headers = {"Idempotency-Key": "idem-1", "svix-id": "msg_1", "X-Request-Id": "req-1"}
    assert delivery_id(config, headers) == "msg_1"


def test_delivery_id_github_header_comes_first_and_names_match_any_case() -> None:
    config = HookConfig.model_validate({"scheme": "token", "tokens": ["t"]})
    headers = {"webhook-id": "msg_1", "x-github-delivery": "72d3162e-cc78-11e3"}
    assert delivery_id(config, headers) == "72d3162e-cc78-11e3"


def test_delivery_id_follows_the_hooks_own_order() -> None:
    config = HookConfig.model_validate(
        {"scheme": "token", "tokens": ["t"], "id_headers": ["X-Event-Id", "X-Request-Id"]}
    )
    headers = {"X-Request-Id": "req-1", "X-Event-Id": "evt-9", "X-GitHub-Delivery": "gh"}
    assert delivery_id(config, headers) == "evt-9"


def test_delivery_id_none_when_absent_or_blank() -> None:
    config = HookConfig.model_validate({"scheme": "token", "tokens": ["t"]})
    assert delivery_id(config, {"X-Request-Id": "  "}) is None
    assert delivery_id(config, {}) is None


def test_delivery_id_too_long_is_hashed_to_fit_the_column() -> None:
    config = HookConfig.model_validate({"scheme": "token", "tokens": ["t"]})
    long_id = "x" * 300
    found = delivery_id(config, {"X-Request-Id": long_id})
    assert found is not None and found.startswith("sha256:") and len(found) <= 255
    assert found == delivery_id(config, {"X-Request-Id": long_id})


# --- redaction ----------------------------------------------------------------------------------


def test_redact_headers_hides_credentials_and_lowercases_names() -> None:
    headers = {
        "Authorization": "Bearer abc",
        "Cookie": "session=1",
        "Set-Cookie": "a=b",
        "Proxy-Authorization": "Basic xyz",
        "X-Hub-Signature": "sha1=00",
        "X-Hub-Signature-256": "sha256=00",
        "webhook-signature": "v1,AA==",
        "svix-signature": "v1,AA==",
        "Stripe-Signature": "t=1,v1=00",
        "X-Gitlab-Token": "glt",
        "X-Client-Secret": "s",
        "X-Acme-Sig": "deadbeef",
        "Content-Type": "application/json",
        "X-GitHub-Event": "pull_request",
        "webhook-id": "msg_1",
    }
    logged = redact_headers(headers, extra=["X-Acme-Sig"])
    visible = {"content-type", "x-github-event", "webhook-id"}
    assert set(logged) == {name.lower() for name in headers}
    assert {name for name, value in logged.items() if value != "[redacted]"} == visible
    assert logged["content-type"] == "application/json"


def test_redact_headers_needs_a_custom_signature_header_passed_as_extra() -> None:
    assert redact_headers({"X-Acme-Sig": "deadbeef"}) == {"x-acme-sig": "deadbeef"}
