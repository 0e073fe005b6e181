"""`tests/unit/ade_tasks/runs/test_dispatch_overlap.py` on PostgreSQL: there a batch's active runs and buffers are read
with one indexed lookup per rule (`overlap.occupancy`), its runs inserted as arrays
(`runs.insert_runs_once`), and the overlap locks are advisory locks."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import event, text
from sqlalchemy.orm import Session

from ade_tasks.clock import utcnow
from ade_tasks.db import overlap as overlap_db
from ade_tasks.db import runs as runs_db
from ade_tasks.db.engine import SessionFactory, create_db_engine, create_session_factory
from ade_tasks.states import RunStatus
from tests.integration.test_dispatch_seen_pg import rules_dir, sender  # noqa: F401 (fixtures)
from tests.unit.ade_tasks.runs.test_dispatch_overlap import (  # noqa: F401 (the tests, run here)
    test_a_batch_of_several_rules_applies_each_rules_policy_to_its_own_active_runs,
    test_allow_all_without_a_limit_runs_everything,
    test_buffer_all_releases_buffered_runs_one_by_one_as_runs_end,
    test_buffer_one_holds_one_run_and_skips_the_rest,
    test_cancel_other_cancels_the_active_run_and_starts_the_new_one,
    test_max_concurrent_limits_allow_all_and_buffers_the_excess,
    test_schedules_skip_by_default_but_manual_runs_do_not,
    test_skip_records_the_trigger_as_skipped_with_the_reason,
    test_the_sweep_releases_buffered_runs_a_dead_worker_left_behind,
)


@pytest.fixture
def session_factory(database_url: str) -> Iterator[SessionFactory]:
    """Sessions with transactions (the overlap locks are transaction-scoped)."""
    engine = create_db_engine(database_url)
    yield create_session_factory(engine)
    engine.dispose()


def test_a_batchs_occupancy_reads_only_its_own_rules_runs_on_a_table_never_analyzed(
    session_factory: SessionFactory,
) -> None:
    # Given 5,000 queued runs of other rules, written faster than any ANALYZE (as at a minute
    # boundary), 2,000 finished runs of one of the batch's three rules, and one active run of
    # each of them
    others = [_queued(f"other-{n}") for n in range(5000)]
    others += [{**_queued("a"), "status": RunStatus.SKIPPED} for _ in range(2000)]
    mine = [_queued(rule_id) for rule_id in ("a", "b", "c")]
    with session_factory.begin() as session:
        for start in range(0, len(others), 1000):
            runs_db.insert_runs_once(session, others[start : start + 1000])
        runs_db.insert_runs_once(session, mine)
    # When the batch's occupancy is read
    with session_factory.begin() as session:
        statements = _statements_of(session, lambda: overlap_db.occupancy(session, ["a", "b", "c"]))
        ((sql, params),) = statements
        plan = session.execute(text(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}"), params).scalar_one()
        active, buffering = overlap_db.occupancy(session, ["a", "b", "c"])
    # Then it counted its rules' runs, reading no run of another rule (a plan that starts from
    # the status index reads all 5,003 queued runs, for every batch of a boundary)
    assert (active, buffering) == ({"a": 1, "b": 1, "c": 1}, set())
    assert _rows_read(plan[0]["Plan"]) <= 3 * 2


def _queued(rule_id: str) -> dict[str, Any]:
    now = utcnow()
    return {
        "id": str(uuid.uuid4()), "rule_id": rule_id, "rule_version": 1, "trigger_type": "webhook",
        "trigger_summary": "", "trigger": {}, "idempotency_key": str(uuid.uuid4()),
        "status": RunStatus.QUEUED, "billing_code": f"auto:{rule_id}", "usage": {},
        "queue": "ade.builtin", "attempt": 0, "buffered": False, "send_count": 1, "sent_at": now,
        "queued_at": now, "finished_at": None, "error": None,
    }  # fmt: skip


def _statements_of(session: Session, work: Callable[[], object]) -> list[tuple[str, Any]]:
    """The SQL text and parameters `work` sent, as psycopg's `%(name)s` text: back to `:name`."""
    seen: list[tuple[str, Any]] = []

    def record(_conn: Any, _cursor: Any, sql: str, params: Any, *_: Any) -> None:
        seen.append((re.sub(r"%\((\w+)\)s", r":\1", sql), params))

    engine = session.get_bind()
    event.listen(engine, "before_cursor_execute", record)
    try:
        work()
    finally:
        event.remove(engine, "before_cursor_execute", record)
    return seen


def _rows_read(node: dict[str, Any]) -> float:
    """Rows the scans of `runs` in a plan produced or filtered away, over all their loops."""
    rows = 0.0
    if node.get("Relation Name") == "runs":
        loops = node.get("Actual Loops", 1)
        rows += (node.get("Actual Rows", 0) + node.get("Rows Removed by Filter", 0)) * loops
        rows += node.get("Rows Removed by Index Recheck", 0) * loops
    return rows + sum(_rows_read(child) for child in node.get("Plans", []))
