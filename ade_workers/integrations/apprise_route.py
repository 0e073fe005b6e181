"""Sending one cluster notification through Apprise (https://github.com/caronc/apprise), which
speaks email, Slack, Microsoft Teams, Matrix, generic JSON/form webhooks and ~100 more, each
named by a URL (`mailtos://`, `slack://`, `msteams://`, `matrixs://`, `json://`, ...).

A route's URL is a credential (a webhook token, an SMTP password): it never appears in an error
raised here; Apprise's own warnings, which name the host and the failure, are the reason given.
Apprise bounds every call with its timeouts (connect and read, 4 s each unless the URL sets
`cto=` / `rto=`), so a slow route fails its attempt instead of hanging its sender.
"""

from __future__ import annotations

import logging
from urllib.parse import unquote, urlsplit

import apprise

from ade_tasks.errors import InvalidInputError, TransientError


def send_apprise(url: str, title: str, body: str, *, route: str) -> None:
    """Send `title` and `body` to the Apprise `url` of `route`; raise with Apprise's reason
    when it was not delivered."""
    notifier = apprise.Apprise()
    if not notifier.add(url):
        raise InvalidInputError(
            f"route {route!r}: Apprise does not understand its URL; set "
            f"ADE_NOTIFICATIONS__ROUTES__{route.upper()}__URL to an Apprise URL "
            "(https://github.com/caronc/apprise/wiki)"
        )
    with apprise.LogCapture(level=logging.WARNING, fmt="%(message)s") as logs:  # type: ignore[no-untyped-call]
        result = notifier.notify(title=title, body=body, body_format=apprise.NotifyFormat.TEXT)
    if not result:
        reason = " ".join(logs.getvalue().split()) or "the service did not take it"
        raise TransientError(f"route {route!r}: {_scrubbed(reason, url)}")


def _scrubbed(text: str, url: str) -> str:
    """`text` without the URL or its password, should Apprise have quoted either."""
    secrets = {url}
    try:
        parts = urlsplit(url)
        if parts.password:
            secrets.add(parts.password)
    except ValueError:
        pass
    for secret in sorted(secrets, key=len, reverse=True):
        text = text.replace(secret, "***").replace(unquote(secret), "***")
    return text
