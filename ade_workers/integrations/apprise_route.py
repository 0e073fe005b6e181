"""Sending one cluster notification through Apprise (https://github.com/caronc/apprise), which
speaks email, Slack, Microsoft Teams, Matrix, generic JSON/form webhooks and ~100 more, each
named by a URL (`mailtos://`, `slack://`, `msteams://`, `matrixs://`, `json://`, ...).

A route's URL is a credential (a webhook token, an SMTP password): it never appears in an error
raised here. The reason given is Apprise's own warnings for the call (the host and the failure)
and how long it took (a refused connection fails at once, a hung one after its read timeout).
Apprise bounds every call with its timeouts (connect and read, 4 s each unless the URL sets
`cto=` / `rto=`), so a slow route fails its attempt instead of hanging its sender.
"""

from __future__ import annotations

import logging
import re
from urllib.parse import unquote, urlsplit

import apprise

from ade_tasks.errors import InvalidInputError, TransientError

_REQUEST_PATH = re.compile(r"url: \S+")

# Apprise's debug lines quote each route's whole URL (`Loaded JSON URL: json://...`): a worker
# run with --loglevel=DEBUG must not write the routes' credentials into its log.
logging.getLogger("apprise").setLevel(logging.INFO)


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
    # The result carries this call's own warnings (Apprise keeps them per call, so routes
    # delivering at once in other threads never mix theirs in).
    result = notifier.notify(title=title, body=body, body_format=apprise.NotifyFormat.TEXT)
    if not result:
        said = " ".join(entry.message for entry in result.logs()) or "the service refused it"
        reason = f"{said} (failed after {result.elapsed:.1f} s)"
        raise TransientError(f"route {route!r}: {_scrubbed(reason, url)}")


def _scrubbed(text: str, url: str) -> str:
    """`text` without the URL or its password, should Apprise have quoted either, nor the
    request path urllib3 names (`with url: /services/T/B/C`: a webhook's token)."""
    text = _REQUEST_PATH.sub("url: ***", text)
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
