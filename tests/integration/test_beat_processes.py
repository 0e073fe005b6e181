"""Real `ade-tasks beat` processes against PostgreSQL and Redis, on clocks at real speed or
simulated faster (`ADE_BEAT_CLOCK_*`)."""

from __future__ import annotations

import random
import signal
from datetime import UTC, datetime, timedelta

from sqlalchemy import func, select, text

from ade_tasks.clock import utcnow
from ade_tasks.db.schema import RunRow, ScheduleOccurrenceRow
from ade_tasks.db.shard_tables import ScheduleShardRow
from tests.conftest import write_rule
from tests.integration.conftest import Cluster
from tests.integration.test_run_path import finished
from tests.scheduler_support import write_minutely_rules
from tests.support import wait_until


def shard_losers(cluster: Cluster, slot: datetime) -> int:
    """How many claims of the slot's shards found them taken."""
    with cluster.session_factory() as session:
        losers = session.scalar(
            select(func.sum(ScheduleShardRow.losers)).where(ScheduleShardRow.slot == slot)
        )
    return int(losers or 0)


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
    # The beats' clock runs at real speed, set less than a minute off so that a minute begins
    # about 15 s from now rather than anywhere up to a minute later.
    anchor = utcnow()
    origin = anchor.replace(second=45, microsecond=0)
    cluster.env.update(
        {
            "ADE_BEAT_CLOCK_ORIGIN": origin.isoformat(),
            "ADE_BEAT_CLOCK_ANCHOR": anchor.isoformat(),
            "ADE_BEAT_CLOCK_SPEED": "1",
        }
    )
    cluster.worker()
    cluster.beat()
    cluster.beat()
    # A trigger a beat sees for the first time starts at its next slot: count from the first
    # boundary after both beats have surely loaded the rule (they refresh every 5 s).
    both_ready = origin + (utcnow() - anchor) + timedelta(seconds=6)

    def first_occurrence() -> ScheduleOccurrenceRow | None:
        with cluster.session_factory() as session:
            return session.scalars(
                select(ScheduleOccurrenceRow)
                .where(ScheduleOccurrenceRow.rule_id == "tick")
                .where(ScheduleOccurrenceRow.slot > both_ready)
                .order_by(ScheduleOccurrenceRow.slot)
            ).first()

    occurrence = wait_until(first_occurrence, 80, "a minute boundary to be claimed")
    # Both beats claim the slot's shard; exactly one wins (and claims and fires the slot), the
    # other's claim is counted as a loser's and it claims no slot of the shard.
    row = wait_until(
        lambda: (
            (row := first_occurrence()) is not None
            and shard_losers(cluster, row.slot) == 1
            and row.outcome == "fired"
            and row
        ),
        15,
        "the second beat to claim the same shard and lose, and the winner to record its run",
    )
    assert row.duplicate_claims == 0
    assert row.run_id
    with cluster.session_factory() as session:
        runs = session.scalars(
            select(RunRow).where(RunRow.trigger["slot"].as_string() == occurrence.slot.isoformat())
        ).all()
    assert [r.id for r in runs] == [row.run_id]
    assert finished(cluster, row.run_id).status == "succeeded"


def test_three_beat_processes_with_faults_fire_every_slot_exactly_once(cluster: Cluster) -> None:
    """200 rules every minute through four simulated slots (15x real time), with one beat
    SIGKILLed at a random moment and another SIGSTOPped past two slots' ticks, then resumed."""
    write_minutely_rules(cluster.session_factory, cluster.tmp / "rules", 200)
    anchor = utcnow() + timedelta(seconds=2)
    origin = datetime(2026, 11, 30, 9, 59, 0, tzinfo=UTC)
    speed = 15.0  # a simulated minute of lateness tolerance is 4 s of real time
    clock = {
        "ADE_BEAT_CLOCK_ORIGIN": origin.isoformat(),
        "ADE_BEAT_CLOCK_ANCHOR": anchor.isoformat(),
        "ADE_BEAT_CLOCK_SPEED": str(speed),
        "ADE_BEAT_STALE_CLAIM_SECONDS": "3",  # the killed beat's orphaned claims, re-fired soon
        # No worker runs these 800 runs: keep the recovery sweep from re-sending them all.
        "ADE_REQUEUE_AFTER_SECONDS": "3600",
    }
    cluster.env.update(clock)
    survivor, killed, stopped = cluster.beat(), cluster.beat(), cluster.beat()

    def simulated_now() -> datetime:
        return origin + (utcnow() - anchor) * speed

    def at(simulated: datetime) -> None:
        wait_until(lambda: simulated_now() >= simulated, 120, f"simulated {simulated:%H:%M:%S}")

    # A beat starts a trigger at its next slot: count from the first slot after every beat has
    # surely loaded the rules (10:00 unless a busy machine slowed the start-ups).
    loaded = simulated_now() + timedelta(seconds=2 * speed)
    first_slot = max(
        datetime(2026, 11, 30, 10, 0, tzinfo=UTC),
        loaded.replace(second=0, microsecond=0) + timedelta(minutes=1),
    )
    last_slot = first_slot + timedelta(minutes=3)
    rng = random.Random()
    kill_at = first_slot + timedelta(seconds=rng.uniform(20, 170))
    at(first_slot + timedelta(seconds=40))
    stopped.signal(signal.SIGSTOP)
    at(kill_at if kill_at > simulated_now() else simulated_now())
    killed.signal(signal.SIGKILL)
    at(first_slot + timedelta(minutes=2, seconds=40))
    stopped.signal(signal.SIGCONT)  # resumes with two simulated minutes of slots behind it
    at(last_slot + timedelta(seconds=40))

    with cluster.session_factory() as session:
        rows = session.execute(
            select(
                ScheduleOccurrenceRow.rule_id,
                ScheduleOccurrenceRow.slot,
                ScheduleOccurrenceRow.outcome,
            )
            .where(ScheduleOccurrenceRow.slot.between(first_slot, last_slot))
            .where(ScheduleOccurrenceRow.rule_id.like("every-minute-%"))
        ).all()
        runs = session.execute(select(RunRow.rule_id, RunRow.trigger)).all()
    in_window = [
        (rule_id, trigger["slot"])
        for rule_id, trigger in runs
        if first_slot.isoformat() <= trigger["slot"] <= last_slot.isoformat()
    ]
    assert survivor.proc.poll() is None
    assert len(rows) == 800 and {outcome for _, _, outcome in rows} == {"fired"}
    assert len(in_window) == 800 and len(set(in_window)) == 800


def test_a_beat_sigkilled_mid_boundary_leaves_no_slot_unfired_or_fired_twice(
    cluster: Cluster,
) -> None:
    """Three beats share a boundary of 1,500 rules; the one caught holding claimed slots whose
    runs it has not recorded is stopped right there and SIGKILLed. Its shard is claimed, so the
    others skip it: its claims are what they re-fire once stale."""
    # Given 1,500 minutely rules (4 shards) and three beats whose clock reaches a minute soon
    write_minutely_rules(cluster.session_factory, cluster.tmp / "rules", 1500)
    anchor = utcnow()
    origin = anchor.replace(second=40, microsecond=0)
    cluster.env.update(
        {
            "ADE_BEAT_CLOCK_ORIGIN": origin.isoformat(),
            "ADE_BEAT_CLOCK_ANCHOR": anchor.isoformat(),
            "ADE_BEAT_CLOCK_SPEED": "1",
            "ADE_BEAT_STALE_CLAIM_SECONDS": "3",
            "ADE_REQUEUE_AFTER_SECONDS": "3600",  # no worker: keep the sweep from re-sending
        }
    )
    beats = {str(beat.pid): beat for beat in (cluster.beat(), cluster.beat(), cluster.beat())}
    loaded = origin + (utcnow() - anchor) + timedelta(seconds=6)  # every beat refreshed
    slot = loaded.replace(second=0, microsecond=0) + timedelta(minutes=1)
    orphans_sql = text(
        "SELECT claimed_by, count(*) FROM schedule_occurrences"
        " WHERE slot = :slot AND outcome = 'claimed' AND rule_id LIKE 'every-minute-%'"
        " GROUP BY claimed_by"
    )

    # When a beat is seen with committed claims of the slot and no outcome yet: stopped at once
    # (so the count below is what it leaves), then killed
    def kill_a_claimant() -> tuple[str, int] | None:
        with cluster.session_factory() as session:
            claimants = session.execute(orphans_sql, {"slot": slot}).all()
        if not claimants:
            return None
        victim = beats[claimants[0][0].split(":")[1]]
        victim.signal(signal.SIGSTOP)
        with cluster.session_factory() as session:
            left = dict(session.execute(orphans_sql, {"slot": slot}).all())
        beat_id = claimants[0][0]
        if not left.get(beat_id):  # it recorded them just before it stopped: wait for another
            victim.signal(signal.SIGCONT)
            return None
        victim.signal(signal.SIGKILL)
        return beat_id, left[beat_id]

    killed, orphaned = wait_until(
        kill_a_claimant, 90, f"a beat holding claims of {slot:%H:%M}", interval=0.005
    )

    # Then the survivors re-fire its claims once stale, and every rule runs once for the slot
    def all_fired() -> bool:
        with cluster.session_factory() as session:
            fired = session.scalar(
                select(func.count())
                .select_from(ScheduleOccurrenceRow)
                .where(ScheduleOccurrenceRow.slot == slot)
                .where(ScheduleOccurrenceRow.rule_id.like("every-minute-%"))
                .where(ScheduleOccurrenceRow.outcome == "fired")
            )
        return fired == 1500

    wait_until(all_fired, 60, f"every occurrence of {slot:%H:%M} to be fired")
    with cluster.session_factory() as session:
        runs = session.execute(select(RunRow.rule_id, RunRow.trigger)).all()
        by_killed = session.scalar(
            select(func.count())
            .select_from(ScheduleOccurrenceRow)
            .where(ScheduleOccurrenceRow.slot == slot)
            .where(ScheduleOccurrenceRow.claimed_by == killed)
        )
    of_slot = [rule_id for rule_id, trigger in runs if trigger["slot"] == slot.isoformat()]
    assert orphaned > 0 and by_killed >= orphaned
    assert len(of_slot) == 1500 and len(set(of_slot)) == 1500
    assert sum(1 for beat in beats.values() if beat.proc.poll() is None) == 2
