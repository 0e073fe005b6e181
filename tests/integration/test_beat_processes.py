"""Real `ade-tasks beat` processes against PostgreSQL and Redis, on the real clock."""

from __future__ import annotations

from sqlalchemy import select

from ade_tasks.db.schema import RunRow, ScheduleOccurrenceRow
from tests.conftest import write_rule
from tests.integration.conftest import Cluster
from tests.integration.test_run_path import finished
from tests.support import wait_until


def test_two_real_beats_fire_a_minutely_rule_once_per_minute(cluster: Cluster) -> None:
    write_rule(
        cluster.tmp / "rules",
        "tick.yaml",
        """
        id: tick
        triggers: [{type: schedule, cron: "* * * * *"}]
        execution: {kind: built-in, actions: [{id: a, type: run-command, command: "echo tock"}]}
        """,
    )
    cluster.sync_rules(cluster.tmp / "rules")
    cluster.worker()
    cluster.beat()
    cluster.beat()

    def first_occurrence() -> ScheduleOccurrenceRow | None:
        with cluster.session_factory() as session:
            return session.scalars(
                select(ScheduleOccurrenceRow)
                .where(ScheduleOccurrenceRow.rule_id == "tick")
                .order_by(ScheduleOccurrenceRow.slot)
            ).first()

    occurrence = wait_until(first_occurrence, 75, "a minute boundary to be claimed")
    # Both beats claim the slot; exactly one wins, the other's claim is counted as a duplicate.
    wait_until(
        lambda: (row := first_occurrence()) is not None and row.duplicate_claims == 1,
        15,
        "the second beat to claim the same slot and lose",
    )
    row = first_occurrence()
    assert row is not None and row.outcome == "fired" and row.run_id
    with cluster.session_factory() as session:
        runs = session.scalars(
            select(RunRow).where(RunRow.trigger["slot"].as_string() == occurrence.slot.isoformat())
        ).all()
    assert [r.id for r in runs] == [row.run_id]
    assert finished(cluster, row.run_id).status == "succeeded"
