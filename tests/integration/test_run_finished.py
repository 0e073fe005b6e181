"""`run.finished` end to end: "when the fix run succeeds, run the slow suite" on a real celery
worker (its housekeeping thread runs the run.finished sweep) against PostgreSQL and Redis."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select

from ade_tasks.clock import utcnow
from ade_tasks.db import run_cancels
from ade_tasks.db.schema import RunRow, ScheduleOccurrenceRow
from ade_tasks.housekeeping import HOUSEKEEPING
from ade_tasks.runs.dispatch import dispatch
from ade_tasks.runs.trigger_events import TriggerEvent
from ade_tasks.triggers.finished_runs import emit_run_finished
from tests.conftest import write_rule
from tests.integration.conftest import Cluster
from tests.support import wait_until

FINAL = ("succeeded", "failed", "cancelled", "timed_out", "skipped")


def runs_of(cluster: Cluster, rule_id: str) -> list[RunRow]:
    with cluster.session_factory() as session:
        query = select(RunRow).where(RunRow.rule_id == rule_id).order_by(RunRow.queued_at)
        return list(session.scalars(query))


def finished(cluster: Cluster, run_id: str) -> RunRow | None:
    with cluster.session_factory() as session:
        run = session.get(RunRow, run_id)
        return run if run is not None and run.status in FINAL else None


def swept_twice_since(cluster: Cluster, at: datetime) -> bool:
    """The worker's run.finished sweep started twice after `at`, so (one thread runs the jobs
    in turn) a whole pass ran after it."""
    with cluster.session_factory() as session:
        slots = session.scalars(
            select(ScheduleOccurrenceRow.slot).where(
                ScheduleOccurrenceRow.rule_id == HOUSEKEEPING,
                ScheduleOccurrenceRow.cron == "run-finished",
                ScheduleOccurrenceRow.slot > at,
            )
        ).all()
    return len(slots) >= 2


def run_fix(cluster: Cluster, outcome: str) -> RunRow:
    event = TriggerEvent.manual({"outcome": outcome})
    run_id = dispatch(cluster.session_factory, cluster.sender(), "fix", event).run.id
    return wait_until(lambda: finished(cluster, run_id), 30, f"run {run_id} of fix to finish")


def test_a_clean_fix_starts_the_slow_suite_once_and_a_failed_one_does_not(
    cluster: Cluster,
) -> None:
    # Given `fix` (succeeds or fails as it is told) and `slow-suite`, which follows clean fixes
    rules = cluster.tmp / "rules"
    write_rule(rules, "fix.yaml", """
        id: fix
        triggers: [{type: manual}]
        inputs: {outcome: {type: string, default: ok}, wait: {type: string, default: "0"}}
        execution: {kind: built-in, actions: [{id: check, type: run-command, command: "sleep {{trigger.inputs.wait}}; test {{trigger.inputs.outcome}} = ok"}]}
        """)  # fmt: skip
    write_rule(rules, "slow-suite.yaml", """
        id: slow-suite
        triggers: [{type: run.finished, rule: fix, status: [completed-clean]}]
        execution: {kind: built-in, actions: [{id: suite, type: run-command, command: "echo {{trigger.run.summary}}"}]}
        """)  # fmt: skip
    write_rule(rules, "tidy-up.yaml", """
        id: tidy-up
        triggers: [{type: run.finished, rule: "fix*", status: [cancelled]}]
        execution: {kind: built-in, actions: [{type: run-command, command: "true"}]}
        """)  # fmt: skip
    cluster.sync_rules(rules)
    cluster.worker()

    # When a fix fails
    failed = run_fix(cluster, "broken")

    # Then (a whole sweep later) the slow suite has not started
    assert failed.status == "failed" and failed.finished_at is not None
    failed_at = failed.finished_at
    wait_until(lambda: swept_twice_since(cluster, failed_at), 30, "two sweeps")
    assert runs_of(cluster, "slow-suite") == []

    # When a fix succeeds
    clean = run_fix(cluster, "ok")

    # Then the slow suite runs once, with the fix's summary in its trigger
    assert (clean.status, clean.queue_status) == ("succeeded", "completed-clean")
    (suite,) = wait_until(lambda: runs_of(cluster, "slow-suite"), 30, "the slow suite")
    suite = wait_until(lambda: finished(cluster, suite.id), 30, "the slow suite to finish")
    assert suite.status == "succeeded" and suite.trigger_type == "run.finished"
    run = suite.trigger["run"]
    assert (run["id"], run["rule"], run["status"]) == (clean.id, "fix", "succeeded")
    assert run["summary"].startswith(f"rule fix · run {clean.id}: succeeded")
    assert run["outputs"]["check"]["exit_code"] == 0

    # When the fix's message is delivered again and its finish emitted again (a worker killed
    # after finishing, a retried finish), and the sweep passes over it
    resent_at = utcnow()
    cluster.sender().send_run(clean.id, queue=clean.queue, rule_id="fix")
    again = emit_run_finished(cluster.session_factory, cluster.sender(), clean.id)
    wait_until(lambda: swept_twice_since(cluster, resent_at), 30, "two sweeps")

    # Then nothing more started
    assert again == [suite.id]
    assert [row.id for row in runs_of(cluster, "slow-suite")] == [suite.id]
    assert finished(cluster, clean.id) is not None

    # When an operator cancels a running fix (its worker records no outcome of its own)
    slow = dispatch(cluster.session_factory, cluster.sender(), "fix",
                    TriggerEvent.manual({"wait": "30"})).run.id  # fmt: skip
    wait_until(lambda: runs_of(cluster, "fix")[-1].status == "running", 30, "the fix to run")
    with cluster.session_factory.begin() as session:
        run_cancels.cancel_run(session, slow, "ops")

    # Then the sweep starts the rule that follows cancelled fixes, once
    (tidy,) = wait_until(lambda: runs_of(cluster, "tidy-up"), 30, "the sweep to start tidy-up")
    assert tidy.trigger["run"]["id"] == slow and tidy.trigger["run"]["status"] == "cancelled"
    started_at = utcnow()
    wait_until(lambda: swept_twice_since(cluster, started_at), 30, "two sweeps")
    assert len(runs_of(cluster, "tidy-up")) == 1 and len(runs_of(cluster, "slow-suite")) == 1
