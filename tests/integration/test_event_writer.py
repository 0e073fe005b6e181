"""The webhook routes' event writer on real PostgreSQL: concurrent deliveries share INSERTs,
and each still gets its own answer (its id, a duplicate's None, or its own error)."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable
from typing import Any

from sqlalchemy import select, text

from ade_api.http.event_writer import EventWriter
from ade_tasks.db.engine import create_db_engine
from ade_tasks.db.schema import IngressEventRow
from ade_tasks.errors import DatabaseUnavailableError, InvalidInputError
from ade_tasks.ingress.intake import event_row
from tests.support import free_port


def delivery(
    n: int, *, delivery_id: str | None = "", body: str = "", source: str = "github"
) -> dict[str, Any]:
    """The row of the n-th delivery (its own delivery id and body hash unless given)."""
    text = body or f"body {n}"
    return event_row(
        source=source,
        delivery_id=f"d-{n}" if delivery_id == "" else delivery_id,
        event=None,
        event_key="github.pr_opened",
        payload={"n": n, "text": text},
        digest=hashlib.sha256(text.encode()).hexdigest() if source == "github" else None,
        trigger_type="github.pr_opened",
    )


def stored(database_url: str) -> dict[int, dict[str, Any]]:
    engine = create_db_engine(database_url)
    try:
        with engine.connect() as connection:
            rows = connection.execute(select(IngressEventRow.id, IngressEventRow.payload))
            return {int(event_id): dict(payload) for event_id, payload in rows}
    finally:
        engine.dispose()


async def gather_answers(
    events: EventWriter, rows: list[dict[str, Any]]
) -> list[int | BaseException | None]:
    try:
        return await asyncio.gather(*(events.record(r) for r in rows), return_exceptions=True)
    finally:
        await events.close()


def counting_inserts(events: EventWriter) -> list[int]:
    """Spy on the writer: the number of rows of each INSERT it sends."""
    sizes: list[int] = []
    insert: Callable[[list[dict[str, Any]]], Awaitable[list[int | None]]] = events._insert

    async def counted(rows: list[dict[str, Any]]) -> list[int | None]:
        sizes.append(len(rows))
        return await insert(rows)

    events._insert = counted  # type: ignore[method-assign]
    return sizes


def test_concurrent_deliveries_share_inserts_and_each_gets_its_own_event(
    database_url: str,
) -> None:
    events = EventWriter(database_url, [].append)
    sizes = counting_inserts(events)
    answers = asyncio.run(gather_answers(events, [delivery(n) for n in range(60)]))

    table = stored(database_url)
    assert len(table) == 60 and sorted(answers) == sorted(table)  # type: ignore[type-var]
    for n, event_id in enumerate(answers):
        assert table[event_id]["n"] == n  # type: ignore[index]
    assert sum(sizes) == 60 and len(sizes) < 60 and max(sizes) > 1


def test_a_redelivery_and_a_replayed_body_in_the_same_insert_store_one_event(
    database_url: str,
) -> None:
    rows = [
        delivery(1),
        delivery(2, delivery_id="d-1", body="another body"),  # GitHub's redelivery
        delivery(3, body="body 1"),  # the first body under a new delivery id
        delivery(4),
    ]
    events = EventWriter(database_url, [].append)
    sizes = counting_inserts(events)
    first, redelivered, replayed, other = asyncio.run(gather_answers(events, rows))

    assert sizes == [4]  # all four in one INSERT
    assert redelivered is None and replayed is None
    assert set(stored(database_url)) == {first, other}


def test_deliveries_without_a_delivery_id_or_body_hash_keep_their_own_payloads(
    database_url: str,
) -> None:
    rows = [delivery(n, delivery_id=None, source="webhook:deploys") for n in range(5)]
    answers = asyncio.run(gather_answers(EventWriter(database_url, [].append), rows))

    table = stored(database_url)
    assert [table[event_id]["n"] for event_id in answers] == list(range(5))  # type: ignore[index]


def test_a_row_the_database_refuses_fails_alone(database_url: str) -> None:
    rows = [delivery(n) for n in range(6)]
    rows[3]["payload"] = {"title": "a\u0000b"}  # JSONB cannot hold NUL
    answers = asyncio.run(gather_answers(EventWriter(database_url, [].append), rows))

    refused = answers.pop(3)
    assert isinstance(refused, InvalidInputError)
    assert "cannot store" in refused.message and "nothing was stored" in refused.message
    assert sorted(stored(database_url)) == sorted(answers)  # type: ignore[type-var]


def test_an_unreachable_database_refuses_with_what_to_do_but_not_where_it_is() -> None:
    port = free_port()
    url = f"postgresql://ade:s3cret-pw@127.0.0.1:{port}/nowhere"
    (answer,) = asyncio.run(gather_answers(EventWriter(url, [].append), [delivery(1)]))

    assert isinstance(answer, DatabaseUnavailableError)
    assert "redeliver it once the database is back" in answer.message
    for where in ("127.0.0.1", str(port), "nowhere", "ade:", "s3cret-pw"):
        assert where not in answer.message, answer.message


def test_a_lone_delivery_is_written_at_once_in_its_own_insert(database_url: str) -> None:
    events = EventWriter(database_url, [].append)
    sizes = counting_inserts(events)
    (answer,) = asyncio.run(gather_answers(events, [delivery(1)]))

    assert sizes == [1] and set(stored(database_url)) == {answer}


def test_a_closed_writer_opens_again_in_another_event_loop(database_url: str) -> None:
    events = EventWriter(database_url, [].append)  # as an app served twice (a test client per test)
    (first,) = asyncio.run(gather_answers(events, [delivery(1)]))
    (second,) = asyncio.run(gather_answers(events, [delivery(2)]))

    assert set(stored(database_url)) == {first, second}


SLOW_INSERTS = (
    "CREATE FUNCTION slow_insert() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
    " PERFORM pg_sleep(0.3); RETURN NEW; END $$",
    "CREATE TRIGGER slow_insert BEFORE INSERT ON ingress_events"
    " FOR EACH ROW EXECUTE FUNCTION slow_insert()",
)


def test_two_inserts_that_deadlock_over_body_hashes_are_retried_row_by_row(
    database_url: str,
) -> None:
    """Two API processes, each with a batch whose second row replays the other's first body:
    each INSERT waits for the other, PostgreSQL cancels one, and its rows are written again
    one by one (found duplicates) instead of failing with a 503."""
    engine = create_db_engine(database_url)
    with engine.begin() as connection:
        for statement in SLOW_INSERTS:  # row by row slowly, so the two INSERTs interleave
            connection.execute(text(statement))
    engine.dispose()
    first, second = EventWriter(database_url, [].append), EventWriter(database_url, [].append)

    async def both() -> list[int | BaseException | None]:
        try:
            return await asyncio.gather(
                first.record(delivery(1, body="A")),
                first.record(delivery(3, body="B")),
                second.record(delivery(2, body="B")),
                second.record(delivery(4, body="A")),
                return_exceptions=True,
            )
        finally:
            await first.close()
            await second.close()

    answers = asyncio.run(both())

    assert not [a for a in answers if isinstance(a, BaseException)], answers
    stored_ids = [a for a in answers if a is not None]
    assert len(stored_ids) == 2 and set(stored(database_url)) == set(stored_ids)
