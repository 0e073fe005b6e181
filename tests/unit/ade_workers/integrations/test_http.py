"""The shared integration HTTP client without a server: Retry-After parsing, how requests are
named in messages, and what is scrubbed from them."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from ade_tasks.errors import InvalidInputError, TransientError
from ade_tasks.retry import RetryPolicy, retry_after_seconds
from ade_workers.integrations.http import (
    IntegrationClient,
    IntegrationError,
    IntegrationUnavailableError,
    excerpt,
)

POLICY = RetryPolicy(attempts=1)


def client(base_url: str, **options: object) -> IntegrationClient:
    return IntegrationClient(
        "Example", base_url, url_fix="check ADE_EXAMPLE__URL", timeout=1.0, policy=POLICY,
        **options,  # type: ignore[arg-type]
    )  # fmt: skip


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("7", 7.0),
        (" 1.5 ", 1.5),
        ("-3", 0.0),
        ("Wed, 01 Jan 2025 00:00:30 GMT", 30.0),
        ("Wed, 01 Jan 2025 00:00:00 GMT", 0.0),
        ("soon", None),
        ("", None),
        (None, None),
    ],
)
def test_retry_after_header_parsing(header: str | None, expected: float | None) -> None:
    now = datetime(2025, 1, 1, tzinfo=UTC)
    assert retry_after_seconds(header, now) == expected


def test_the_unavailable_error_is_the_retryable_one_and_both_carry_the_service() -> None:
    refused = IntegrationError("no", service="GitHub at https://x", status=404)
    later = IntegrationUnavailableError("later", service="GitHub", status=503, retry_after=2.0)

    assert not isinstance(refused, TransientError) and isinstance(later, TransientError)
    assert (refused.service, refused.status) == ("GitHub at https://x", 404)
    assert (later.service, later.status, later.retry_after) == ("GitHub", 503, 2.0)
    # With no message of its own, an error says what kind it is (its docstring).
    assert IntegrationError().message.startswith("An outside service refused the request")


def test_a_request_is_named_by_its_path_and_the_service_by_its_url() -> None:
    with client("https://user:hunter22@api.example.com/v1/") as named:
        assert named.service == "Example at https://api.example.com/v1"
        assert named.subject("GET", "/things") == "GET /things"
        # An absolute link (pagination) is named by its path, without its query.
        assert named.subject("GET", "https://api.example.com/v1/things?page=2") == "GET /v1/things"
        assert "hunter22" not in repr(named)


def test_a_request_may_be_named_by_its_whole_url() -> None:
    with client("https://user:hunter22@api.example.com/v1/", urls="full") as named:
        assert named.service == "Example at https://api.example.com/v1"
        assert named.subject("POST", "/chat") == "POST https://api.example.com/v1/chat"
        assert named.subject("GET", "https://user:hunter22@api.example.com/x?key=1") == (
            "GET https://api.example.com/x"
        )


def test_a_secret_url_is_never_shown_only_the_service() -> None:
    url = "https://hooks.example.com/services/T1/B2/s3cr3t"
    with client(url, urls="hidden") as hidden:
        assert hidden.service == "Example"
        assert hidden.subject("POST", url) == "Example"
        # The whole URL, and its path on its own, are scrubbed (the longer first).
        assert hidden.scrub(f"no_service for {url} (/services/T1/B2/s3cr3t)") == (
            "no_service for *** (***)"
        )


def test_scrubbing_hides_the_secrets_and_a_urls_password_but_not_a_bare_slash() -> None:
    with client("https://bot:pa55word@api.example.com", secrets=["tok-123", None, ""]) as scrubbed:
        assert scrubbed.scrub("token tok-123, password pa55word, path /") == (
            "token ***, password ***, path /"
        )


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        (
            "ftp://files.example.com/s3cr3t",
            "must be http(s)://host[:port][/path], got scheme 'ftp'",
        ),
        ("https://", "must be http(s)://host[:port][/path]"),
        ("http://[::1/s3cr3t", "is not a valid URL"),
    ],
)
def test_a_bad_url_is_refused_without_quoting_it(url: str, reason: str) -> None:
    with pytest.raises(InvalidInputError) as caught:
        client(url)
    assert caught.value.message.startswith(f"Example URL {reason}")
    assert caught.value.message.endswith("; check ADE_EXAMPLE__URL")
    assert "s3cr3t" not in caught.value.message


def test_a_timeout_must_be_positive() -> None:
    with pytest.raises(InvalidInputError, match="Example timeout must be > 0 seconds, got 0"):
        IntegrationClient(
            "Example", "https://api.example.com", url_fix="-", timeout=0, policy=POLICY
        )


def test_excerpts_are_cut_with_an_ellipsis() -> None:
    assert excerpt("  short  ") == "short"
    assert excerpt("x" * 301) == "x" * 300 + "..."
    assert excerpt("abcdef", limit=3) == "abc..."
