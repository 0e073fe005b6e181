"""The relay's pure parts: the page format both sides speak, the drain's non-advancing check,
the drain over an in-memory relay (SQLite, no sockets) and rule health's relay path."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from ade_tasks.db import cursors as cursors_db
from ade_tasks.db.engine import create_db_engine, create_session_factory
from ade_tasks.db.heartbeats import RELAY_DRAIN, Heartbeat
from ade_tasks.db.migrate import upgrade
from ade_tasks.relay import store
from ade_tasks.relay.drain import NonAdvancingCursorError, check_advancing, cursor_source, drain
from ade_tasks.relay.wire import (
    RelayedEvent,
    RelayPage,
    RelayProtocolError,
    page_document,
    parse_page,
)
from ade_tasks.triggers.health import LiveState, rule_health
from tests.fixtures import GITHUB_FIXTURES
from tests.unit.ade_tasks.triggers.test_health import rule

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
PR = (GITHUB_FIXTURES / "pull_request/opened.payload.json").read_bytes()


class Sent:
    """A TaskSender that keeps the ingress event ids it was asked to send."""

    def __init__(self) -> None:
        self.ingress: list[int] = []

    def send_ingress(self, *event_ids: int) -> None:
        self.ingress.extend(event_ids)

    def __getattr__(self, name: str) -> object:
        raise AssertionError(f"the drain must only send ingress events, not call {name}")


class MemoryRelay:
    """A relay's store in SQLite, served as pages the way `relay serve` serves them."""

    def __init__(self, tmp: Path) -> None:
        engine = create_db_engine(f"sqlite:///{tmp / 'relay.db'}")
        store.create_schema(engine)
        self.sessions = create_session_factory(engine)
        self.url = "http://relay.test"

    def add(self, delivery: str, event: str, body: bytes) -> int | None:
        with self.sessions.begin() as session:
            return store.store(
                session, source="github", delivery_id=delivery, event=event, body=body, now=NOW
            )

    def events(self, after: int, limit: int = 100) -> RelayPage:
        with self.sessions() as session:
            document = page_document(store.events_after(session, after, limit), 0)
        return parse_page(document, self.url)


def test_a_page_round_trips_the_exact_body_bytes() -> None:
    stored = store.StoredEvent(7, "github", "d", "issues", b"\xff{not utf-8", NOW)
    page = parse_page(page_document([stored], 9), "the relay")
    assert page.newest == 9
    assert page.events == (RelayedEvent(7, "github", "d", "issues", b"\xff{not utf-8"),)


def test_an_event_with_a_broken_body_is_poison_but_a_page_without_cursors_is_refused() -> None:
    broken = {"events": [{"cursor": 1, "source": "github", "body": "***"}]}
    assert parse_page(broken, "r").events[0].problem == "the relayed event's `body` is not base64"
    with pytest.raises(RelayProtocolError, match=r"events\[0\] has no integer `cursor`"):
        parse_page({"events": [{"cursor": "1", "source": "github"}]}, "r")
    with pytest.raises(RelayProtocolError, match="no `events` list"):
        parse_page(["not", "a", "page"], "r")


@pytest.mark.parametrize("cursors", [[5], [4], [6, 6], [7, 6]])
def test_events_at_or_before_the_cursor_or_out_of_order_stop_the_drain(
    cursors: list[int],
) -> None:
    page = RelayPage(tuple(RelayedEvent(c, "github", None, None, b"") for c in cursors), 0)
    with pytest.raises(NonAdvancingCursorError, match="replay the same events forever"):
        check_advancing(page, 5, "http://relay")


def test_cursors_only_grow_even_after_every_event_was_pruned(tmp_path: Path) -> None:
    relay = MemoryRelay(tmp_path)
    assert [relay.add(f"d{n}", "issues", b"{}") for n in range(3)] == [1, 2, 3]
    assert relay.add("d1", "issues", b"{}") is None  # the same delivery id: kept once
    with relay.sessions.begin() as session:
        assert store.prune(session, NOW + timedelta(days=8), timedelta(days=7)) == 3
    assert relay.add("d9", "issues", b"{}") == 4


def test_a_drain_pages_through_passes_poison_and_commits_its_cursor(tmp_path: Path) -> None:
    # given a relay holding 150 deliveries, the 120th of them malformed
    relay = MemoryRelay(tmp_path)
    for number in range(150):
        body = b"{broken" if number == 119 else PR + b" " * number
        relay.add(f"d{number}", "pull_request", body)
    engine = create_db_engine(f"sqlite:///{tmp_path / 'cluster.db'}")
    upgrade(engine)
    cluster = create_session_factory(engine)
    sent = Sent()

    # when the cluster drains it
    report = drain(cluster, sent, relay, {}, drainer="test")  # type: ignore[arg-type]

    # then two pages were read, 149 events stored and sent, the poison one recorded, and the
    # cursor passed all of them
    assert (report.pages, report.cursor) == (2, 150)
    assert report.outcomes == {"stored": 149, "poisoned": 1}
    assert len(sent.ingress) == 149
    assert report.poisoned[0].startswith("relayed event 120 refused: the body is not valid JSON")
    with cluster() as session:
        assert cursors_db.read(session, cursor_source(relay.url)) == "150"
    # and draining again finds nothing new and stores nothing twice
    again = drain(cluster, sent, relay, {}, drainer="test")  # type: ignore[arg-type]
    assert (again.pages, again.outcomes, len(sent.ingress)) == (1, {}, 149)


def relay_drain(error: str | None = None, seen: timedelta = timedelta(0)) -> Heartbeat:
    return Heartbeat("beat-1/relay", RELAY_DRAIN, NOW - seen, 30.0, relay="https://r", error=error)


def test_a_live_relay_drain_fires_github_rules_without_the_secret() -> None:
    health = rule_health(
        rule({"type": "github.pr_opened"}), LiveState(NOW, heartbeats=(relay_drain(),))
    )
    assert health.ready
    assert health.triggers[0].path == "relay https://r (drained by beat beat-1)"


def test_a_failing_or_stopped_relay_drain_fires_nothing() -> None:
    failing = LiveState(NOW, heartbeats=(relay_drain("the relay answered 500"),))
    (trigger,) = rule_health(rule({"type": "github.issue_opened"}), failing).triggers
    assert not trigger.ready
    assert trigger.error and "drain of relay https://r is failing: the relay answered 500" in (
        trigger.error
    )
    gone = LiveState(NOW, heartbeats=(relay_drain(seen=timedelta(minutes=5)),))
    assert not rule_health(rule({"type": "github.issue_opened"}), gone).ready
