"""Batches sent to PostgreSQL as binary arrays (`db.prepared.BinaryArray`) keep every value as
it was: the characters a text array has to quote and escape, NULLs, JSON and timestamps."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import event, select

from ade_tasks.db import occurrences as occ_db
from ade_tasks.db import pauses as pauses_db
from ade_tasks.db import rules as rules_db
from ade_tasks.db.engine import SessionFactory, create_db_engine, create_session_factory
from ade_tasks.db.occurrences import OccurrenceKey
from ade_tasks.db.runs import RUNS, insert_runs_once
from ade_tasks.db.schema import ScheduleOccurrenceRow
from ade_tasks.states import OccurrenceOutcome
from tests.integration.test_history_partitions_pg import run_values
from tests.scheduler_support import write_minutely_rules

AWKWARD = 'a "quoted", {braced} \\back\\slashed\\ NULL, ünïcode ✓ \t tab'


@pytest.fixture
def session_factory(database_url: str) -> Iterator[SessionFactory]:
    engine = create_db_engine(database_url)
    yield create_session_factory(engine)
    engine.dispose()


def test_a_batch_of_runs_keeps_every_value(session_factory: SessionFactory) -> None:
    queued_at = datetime(2026, 12, 3, 16, 10, 0, 123456, tzinfo=UTC)
    batch = [
        run_values(queued_at, status="queued", trigger_summary=AWKWARD, trigger={"note": AWKWARD},
                   error=None, finished_at=None, sent_at=queued_at),
        run_values(queued_at + timedelta(seconds=1), status="skipped", trigger_summary="NULL",
                   error=AWKWARD, usage={"cost": 1.5, "list": [1, None, "x"]}, rule_version=7),
    ]  # fmt: skip
    with session_factory.begin() as session:
        assert insert_runs_once(session, batch) == {batch[0]["id"], batch[1]["id"]}
    with session_factory() as session:
        rows = {row.id: row._asdict() for row in session.execute(select(RUNS))}
    for values in batch:
        stored = rows[values["id"]]
        assert {column: stored[column] for column in values} == values


def test_claims_and_outcomes_keep_crons_and_reasons_with_commas_and_quotes(
    session_factory: SessionFactory,
) -> None:
    slot = datetime(2026, 12, 3, 16, 30, tzinfo=UTC)
    keys = [
        OccurrenceKey("r-1", 0, "0,30 * * * *", slot),
        OccurrenceKey("r-2", 3, "*/5 * * * 1-5", slot),
    ]
    with session_factory.begin() as session:
        assert occ_db.claim(session, keys, "beat") == sorted(keys)
        outcomes = [
            occ_db.Outcome(keys[0], OccurrenceOutcome.FIRED, run_id="run-1"),
            occ_db.Outcome(keys[1], OccurrenceOutcome.SKIPPED, reason=AWKWARD),
        ]
        occ_db.record_outcomes(session, outcomes)
    with session_factory.begin() as session:
        assert occ_db.claim(session, keys, "another beat") == []  # both lost, counted
        rows = session.scalars(
            select(ScheduleOccurrenceRow).order_by(ScheduleOccurrenceRow.rule_id)
        )
        stored = [(r.cron, r.trigger_index, r.outcome, r.run_id, r.reason, r.duplicate_claims)
                  for r in rows]  # fmt: skip
    assert stored == [
        ("0,30 * * * *", 0, "fired", "run-1", None, 1),
        ("*/5 * * * 1-5", 3, "skipped", None, AWKWARD, 1),
    ]
    with session_factory() as session:
        assert occ_db.last_slots(session, [("r-1", 0, "0,30 * * * *"), ("r-3", 0, "x")]) == {
            ("r-1", 0, "0,30 * * * *"): slot
        }


def test_a_batchs_rules_and_pauses_are_read_by_one_array_each(
    session_factory: SessionFactory, tmp_path: Path
) -> None:
    ids = write_minutely_rules(session_factory, tmp_path / "rules", 3)
    with session_factory.begin() as session:
        pauses_db.pause(session, ids[0], None, "whole rule", "ops")
        pauses_db.pause(session, ids[2], 0, "its one trigger", "ops")
    asked = [*ids, "no-such-rule", ids[1]]
    with session_factory() as session:
        statements = []

        @event.listens_for(session.get_bind(), "before_cursor_execute")
        def seen(_c: object, _cur: object, sql: str, *_: object) -> None:
            statements.append(sql)

        snapshots = rules_db.rule_snapshots(session, asked)
        pauses = pauses_db.pauses_of(session, asked)
        event.remove(session.get_bind(), "before_cursor_execute", seen)
    assert sorted(snapshots) == ids
    assert {rule_id: snapshot.rule.id for rule_id, snapshot in snapshots.items()} == {
        i: i for i in ids
    }
    assert {
        rule_id: [(p.trigger_index, p.note) for p in found] for rule_id, found in pauses.items()
    } == {
        ids[0]: [(None, "whole rule")],
        ids[2]: [(0, "its one trigger")],
    }
    assert len(statements) == 2 and all("ANY" in sql for sql in statements), statements
