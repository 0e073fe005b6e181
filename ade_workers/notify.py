"""Notifications through a Slack-compatible incoming webhook (`POST {"text": ...}`).

The webhook URL is a credential (anyone holding it can post), so no message, log line or
chained exception produced here contains it: errors speak of "the notify webhook".
"""

from __future__ import annotations

import logging
import time

import httpx

from ade_tasks.errors import AdeError, InvalidInputError, TransientError
from ade_tasks.retry import RetryPolicy, retry_after_seconds

log = logging.getLogger(__name__)

_EXCERPT = 200


class NotifyError(AdeError):
    """The notify webhook refused the message; repeating it unchanged will not help."""

    def __init__(self, message: str | None = None, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class NotifyUnavailableError(TransientError):
    """The notify webhook could not be reached or asked us to come back later."""

    def __init__(self, message: str | None = None, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


def notification_text(text: str, marker: str) -> str:
    """`text` with `(ade {marker})` as its last line, so a reader can tell which run and step
    sent it (a webhook cannot be searched, so the marker cannot make the post idempotent)."""
    if not marker.strip() or "\n" in marker or "\r" in marker:
        raise InvalidInputError(f"notify marker {marker!r} must be one non-empty line")
    return f"{text.rstrip()}\n(ade {marker})"


def send_notification(
    url: str,
    text: str,
    *,
    marker: str,
    policy: RetryPolicy,
    timeout: float = 10,
    deadline: float | None = None,
) -> None:
    """Post `text` to the webhook at `url`, retrying 5xx, 429, timeouts and connection errors."""
    _check_url(url)
    if timeout <= 0:
        raise InvalidInputError(f"notify timeout must be > 0 seconds, got {timeout}")
    payload = {"text": notification_text(text, marker)}
    # Redirects are not followed: a webhook that redirects is misconfigured, and following one
    # would re-send the message somewhere the operator never configured.
    client = httpx.Client(headers={"User-Agent": "ade-tasks"}, follow_redirects=False)
    tries = 0

    def attempt() -> None:
        nonlocal tries
        tries += 1
        budget = timeout if deadline is None else min(timeout, deadline - time.monotonic())
        if budget <= 0:
            raise NotifyUnavailableError(
                "the run's deadline passed before the notify webhook could be called"
            )
        _post(client, url, payload, budget)

    def note(number: int, exc: TransientError, delay: float) -> None:
        log.warning("notify webhook failed (retry %d in %.2fs): %s", number, delay, exc)

    try:
        policy.run(attempt, deadline=deadline, on_retry=note)
    except NotifyUnavailableError as exc:
        raise NotifyUnavailableError(
            f"{exc.message}; gave up after {tries} attempt{'s' if tries != 1 else ''}; "
            "the notification was not delivered",
            retry_after=exc.retry_after,
        ) from None
    finally:
        client.close()


def _check_url(url: str) -> None:
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError):
        raise InvalidInputError(
            "the notify webhook URL is not a valid URL; set an http(s) incoming-webhook URL"
        ) from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise InvalidInputError(
            f"the notify webhook URL must be http:// or https:// with a host "
            f"(got scheme {parsed.scheme!r}); set an incoming-webhook URL"
        )


def _post(client: httpx.Client, url: str, payload: dict[str, str], timeout: float) -> None:
    # `from None` throughout: httpx exceptions carry the request, and so the URL.
    try:
        response = client.post(url, json=payload, timeout=timeout)
    except httpx.TimeoutException:
        raise NotifyUnavailableError(
            f"the notify webhook did not answer within {timeout:g}s"
        ) from None
    except httpx.TransportError as exc:
        raise NotifyUnavailableError(
            f"could not reach the notify webhook ({type(exc).__name__})"
        ) from None
    if response.is_success:
        return
    status = response.status_code
    said = _scrub(response.text.strip()[:_EXCERPT], url)
    head = f"the notify webhook answered {status}" + (f" ({said})" if said else "")
    if status == 429 or status >= 500:
        retry_after = retry_after_seconds(response.headers.get("retry-after"))
        raise NotifyUnavailableError(head, retry_after=retry_after)
    if status in (401, 403, 404, 410):
        todo = "the webhook was revoked or mistyped; configure a current incoming-webhook URL"
    elif 300 <= status < 400:
        todo = "webhooks are not followed through redirects; configure the final URL"
    else:
        todo = "check the message (Slack-compatible webhooks take {'text': ...})"
    raise NotifyError(f"{head}; {todo}", status=status)


def _scrub(text: str, url: str) -> str:
    # A webhook echoing its own address back must not smuggle it into our message.
    path = httpx.URL(url).path
    text = text.replace(url, "<the notify webhook>")
    return text.replace(path, "<path>") if len(path) > 1 else text
