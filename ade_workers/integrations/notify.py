"""Notifications through a Slack-compatible incoming webhook (`POST {"text": ...}`).

The webhook URL is a credential (anyone holding it can post), so the shared client treats it as
one: no message, log line or chained exception produced here contains it, and errors speak of
"the notify webhook".
"""

from __future__ import annotations

from ade_tasks.errors import InvalidInputError
from ade_tasks.retry import RetryPolicy
from ade_workers.integrations.http import IntegrationClient


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
    """Post `text` to the webhook at `url`, retrying 5xx, 408, 429, timeouts and connection
    errors."""
    # Redirects are not followed: a webhook that redirects is misconfigured, and following one
    # would re-send the message somewhere the operator never configured.
    with IntegrationClient(
        "the notify webhook",
        url,
        url_fix="set an http(s) incoming-webhook URL",
        timeout=timeout,
        policy=policy,
        urls="hidden",
    ) as client:
        payload = {"text": notification_text(text, marker)}
        client.retrying(
            "could not deliver the notification",
            lambda: client.send("POST", url, deadline=deadline, advice=_advice, json=payload),
            deadline=deadline,
            advice="try again later or raise the step's retry attempts",
        )


def _advice(status: int) -> str:
    if status in (401, 403, 404, 410):
        return "the webhook was revoked or mistyped; configure a current incoming-webhook URL"
    if 300 <= status < 400:
        return "webhooks are not followed through redirects; configure the final URL"
    return "check the message (Slack-compatible webhooks take {'text': ...})"
