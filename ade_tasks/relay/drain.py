"""Draining a relay into the cluster by cursor, with ADE's rules.

- Pages of at most 100 events, oldest first, after the cursor stored in `ingress_cursors`
  under `relay:<url>`.
- Every event of a page is attempted (`ade_tasks.relay.deliveries.accept`) before the cursor
  moves past the page, and the cursor is committed once per page. A drain killed mid-page
  replays that page: the intake's duplicate check (delivery id, body hash) makes it harmless.
- A poison event (one the intake refuses) never stalls the drain: it is recorded with the
  reason and the cursor passes it.
- A relay that answers events at or before the cursor, or out of order, would replay forever:
  `NonAdvancingCursorError` stops the drain (nothing of that page is stored, the cursor stays),
  and the caller reports it (log, heartbeat, rule health). One request per slot, never a loop.
- A relay that fails (5xx, unreachable) raises `RelayUnavailableError`; a database or broker
  failure propagates. Either way the cursor stays at the last fully attempted page.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from ade_tasks.clock import utcnow
from ade_tasks.db import cursors as cursors_db
from ade_tasks.db.engine import SessionFactory
from ade_tasks.errors import AdeError
from ade_tasks.hooks.config import HookConfig
from ade_tasks.relay.deliveries import PoisonEventError, accept
from ade_tasks.relay.store import PAGE_LIMIT
from ade_tasks.relay.wire import RelayPage
from ade_tasks.runs.senders import IngressSender

log = logging.getLogger(__name__)


class NonAdvancingCursorError(AdeError):
    """The relay answered events at or before the drain's cursor; the drain stopped."""


class RelayClient(Protocol):
    """What the drain needs from a relay (`ade_tasks.relay.client.HttpRelayClient`)."""

    url: str

    def events(self, after: int, limit: int = PAGE_LIMIT) -> RelayPage: ...


@dataclass
class DrainReport:
    """What one drain did: pages read, events per outcome, the poison events' reasons."""

    cursor: int
    pages: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    poisoned: list[str] = field(default_factory=list)


def cursor_source(url: str) -> str:
    """The `ingress_cursors` key of a relay."""
    return f"relay:{url.rstrip('/')}"[:255]


def drain(
    session_factory: SessionFactory,
    sender: IngressSender,
    client: RelayClient,
    hooks: Mapping[str, HookConfig],
    *,
    drainer: str,
    deadline: float | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> DrainReport:
    """Drain the relay until a page comes back short (or `deadline` on `clock` passes)."""
    source = cursor_source(client.url)
    with session_factory() as session:
        stored = cursors_db.read(session, source)
    report = DrainReport(cursor=int(stored) if stored and stored.isdigit() else 0)
    while deadline is None or clock() < deadline:
        page = client.events(report.cursor, PAGE_LIMIT)
        check_advancing(page, report.cursor, client.url)
        for relayed in page.events:
            try:
                outcome = accept(session_factory, sender, relayed, hooks).value
            except PoisonEventError as exc:
                log.warning("relay %s: %s; skipped", client.url, exc.message)
                report.poisoned.append(exc.message)
                outcome = "poisoned"
            report.outcomes[outcome] = report.outcomes.get(outcome, 0) + 1
        report.pages += 1
        if page.events:
            report.cursor = page.events[-1].cursor
            with session_factory.begin() as session:
                cursors_db.write(session, source, str(report.cursor), by=drainer, now=utcnow())
        if len(page.events) < PAGE_LIMIT:
            break
    return report


def check_advancing(page: RelayPage, after: int, url: str) -> None:
    """Refuse a page whose cursors do not all come after `after`, strictly increasing."""
    previous = after
    for relayed in page.events:
        if relayed.cursor <= previous:
            raise NonAdvancingCursorError(
                f"the relay at {url} answered GET /relay/v1/events?after={after} with an event "
                f"at cursor {relayed.cursor}, not after {previous}: draining it would replay "
                "the same events forever, so the drain stopped with the cursor at "
                f"{after}. Check that ADE_RELAY__URL points at an `ade-tasks relay serve` and "
                "that no proxy or cache in front of it ignores the `after` parameter"
            )
        previous = relayed.cursor
