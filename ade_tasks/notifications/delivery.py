"""Delivering queued notifications: claim the due ones under a lease, send each through its
route, and settle it: sent, or retried later with exponential backoff (every failure logged
with the route, the attempt and the reason), or failed for good after the attempts.

Sending is a function (`Send`) the edge provides (`ade_workers.notifier` sends through
Apprise); a failure of it never reaches a run, whose outcome was recorded before its event was
queued. A delivery that hangs past `lease` is claimed again by a later sweep, so at worst a
route that answers after its lease got the message twice; a lease shorter than the route's own
timeouts would make that the rule, so the lease is `LEASE` (Apprise's timeouts are seconds).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from datetime import datetime, timedelta

from ade_tasks.clock import utcnow
from ade_tasks.db import notifications as outbox
from ade_tasks.db.engine import SessionFactory
from ade_tasks.db.notifications import Claimed
from ade_tasks.retry import RetryPolicy
from ade_tasks.settings import NotificationSettings

log = logging.getLogger(__name__)

#: Sends one notification (route name, title, body); raises when the route did not take it.
Send = Callable[[str, str, str], None]
#: How long a claimed notification is left to its delivery before another may claim it.
LEASE = timedelta(minutes=5)
#: How many notifications one sweep claims at most.
BATCH = 100


def retry_policy(settings: NotificationSettings) -> RetryPolicy:
    """The backoff between attempts of one notification, from the settings."""
    return RetryPolicy(
        attempts=settings.attempts,
        initial_delay=settings.retry_seconds,
        max_delay=settings.max_retry_seconds,
    )


def claim(
    session_factory: SessionFactory,
    owner: str,
    now: datetime,
    *,
    busy_routes: Collection[str] = (),
) -> list[Claimed]:
    """Claim the due notifications, leaving those of `busy_routes` (still delivering here)."""
    with session_factory.begin() as session:
        return outbox.claim_due(
            session, now, owner, LEASE, limit=BATCH, skip_routes=busy_routes
        )


def deliver(
    session_factory: SessionFactory,
    notification: Claimed,
    send: Send,
    policy: RetryPolicy,
    clock: Callable[[], datetime] = utcnow,
) -> bool:
    """Send one claimed notification and record the outcome: True when the route took it."""
    try:
        send(notification.route, notification.title, notification.body)
    except Exception as exc:
        _failed(session_factory, notification, exc, policy, clock())
        return False
    with session_factory.begin() as session:
        outbox.mark_sent(session, notification.id, clock())
    return True


def _failed(
    session_factory: SessionFactory,
    notification: Claimed,
    exc: Exception,
    policy: RetryPolicy,
    now: datetime,
) -> None:
    attempt = notification.attempts + 1
    reason = str(exc) or type(exc).__name__
    what = (
        f"notification {notification.key} to route {notification.route!r} failed "
        f"(attempt {attempt} of {policy.max_tries}): {reason}"
    )
    if attempt < policy.max_tries:
        delay = policy.delay_for(attempt)
        retry_at: datetime | None = now + timedelta(seconds=delay)
        log.warning("%s; retrying in %.0f s", what, delay)
    else:
        retry_at = None
        log.error(
            "%s; giving up (ADE_NOTIFICATIONS__ATTEMPTS); check the route's URL and service", what
        )
    with session_factory.begin() as session:
        outbox.mark_failed(session, notification.id, reason[:2000], retry_at)
