"""Real `ade-tasks beat` processes whose machines' clocks are off (libfaketime), on PostgreSQL:
beats judge slots and stamp claims and runs by the database's clock, and say when theirs is off.

The beats run on a simulated clock ten times as fast as the database's (the one test beats use
to cover several minutes quickly, `ADE_BEAT_CLOCK_*`); what it speeds up is the database's time
the beats follow, so a beat 90 s fast that judged by its own clock would fire 900 simulated
seconds early."""

from __future__ import annotations

import re
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import func, select

from ade_tasks.clock import utcnow
from ade_tasks.db.schema import RunRow, ScheduleOccurrenceRow
from tests.integration.conftest import Cluster
from tests.scheduler_support import write_minutely_rules
from tests.support import Child, wait_until

LIBFAKETIME = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")
RULES = 10
SPEED = 10
ORIGIN = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)  # the simulated time at the anchor
#: The simulated clock's rounding (to microseconds), the only slack in "never early".
ROUNDING = timedelta(milliseconds=1)


def skewed(seconds: int) -> dict[str, str]:
    """The environment of a process whose machine's clock is `seconds` off. Its monotonic clock
    is shifted too (it only ever measures intervals): with FAKETIME_DONT_FAKE_MONOTONIC=1,
    libfaketime 0.9.10 fails Python's `time.sleep` with EINVAL."""
    return {"LD_PRELOAD": str(LIBFAKETIME), "FAKETIME": f"{seconds:+d}s"}


def logged_offset(beat: Child) -> float | None:
    """The skew a beat logged (positive: its clock is ahead), or None."""
    said = re.search(r"this machine's clock is ([\d.]+) s (ahead of|behind)", beat.output())
    if said is None:
        return None
    return float(said[1]) * (1 if said[2] == "ahead of" else -1)


@pytest.mark.skipif(not LIBFAKETIME.exists() or not shutil.which("faketime"), reason="no faketime")
def test_beats_90_s_fast_and_slow_fire_every_slot_once_and_never_early(cluster: Cluster) -> None:
    # given rules that fire every minute, skipped while a run of theirs is active (the schedule
    # default), a worker that runs them, and a simulated clock starting at 10:00 in a while
    write_minutely_rules(cluster.session_factory, cluster.tmp / "rules", RULES, overlap="skip")
    # 6 real seconds are a simulated minute: a beat started after now has no slot before 10:00,
    # whose run would wait for the worker and have the next one skipped.
    anchor = utcnow() + timedelta(seconds=60 / SPEED)
    cluster.env.update(
        {
            "ADE_BEAT_CLOCK_ORIGIN": ORIGIN.isoformat(),
            "ADE_BEAT_CLOCK_ANCHOR": anchor.isoformat(),
            "ADE_BEAT_CLOCK_SPEED": str(SPEED),
        }
    )

    def due(slot: datetime) -> datetime:
        """The database's time at which `slot` is due."""
        return anchor + (slot - ORIGIN) / SPEED

    def simulated(moment: datetime) -> datetime:
        return ORIGIN + (moment - anchor) * SPEED

    # when three beats run: one on the database's clock, one 90 s fast, one 90 s slow
    normal, fast, slow = cluster.beat(), cluster.beat(skewed(90)), cluster.beat(skewed(-90))
    cluster.worker()
    # A beat starts a trigger at its next slot: count three slots from the first one after every
    # beat has surely loaded the rules (10:00 unless a busy machine slowed the start-ups).
    loaded = simulated(utcnow() + timedelta(seconds=2))
    first = max(ORIGIN, loaded.replace(second=0, microsecond=0) + timedelta(minutes=1))
    slots = [first + timedelta(minutes=n) for n in range(3)]
    api = cluster.api()

    def settled() -> bool:
        with cluster.session_factory() as session:
            done = session.scalar(
                select(func.count())
                .select_from(ScheduleOccurrenceRow)
                .where(ScheduleOccurrenceRow.rule_id.like("every-minute-%"))
                .where(ScheduleOccurrenceRow.slot.in_(slots))
                .where(ScheduleOccurrenceRow.outcome != "claimed")
            )
        return done == RULES * len(slots)

    wait_until(settled, (due(slots[-1]) - utcnow()).total_seconds() + 30, "every slot fired")

    # then every slot of every rule fired once, by a run of its own, none of them skipped
    with cluster.session_factory() as session:
        database_now = session.scalar(select(func.clock_timestamp()))
        occurrences = session.execute(
            select(
                ScheduleOccurrenceRow.rule_id,
                ScheduleOccurrenceRow.slot,
                ScheduleOccurrenceRow.outcome,
                ScheduleOccurrenceRow.claimed_at,
            )
        ).all()
        runs = session.execute(select(RunRow.rule_id, RunRow.trigger, RunRow.queued_at)).all()
    rules = [(o.rule_id, o.slot, o.outcome) for o in occurrences if o.rule_id.startswith("every")]
    in_window = [(rule, slot) for rule, slot, outcome in rules if slot in slots]
    assert len(in_window) == len(set(in_window)) == RULES * len(slots)
    assert {outcome for *_, outcome in rules} == {"fired"}, "a slot was skipped or missed"
    run_slots = [(r.rule_id, datetime.fromisoformat(r.trigger["slot"])) for r in runs]
    assert len(run_slots) == len(set(run_slots)) and set(in_window) <= set(run_slots)
    # and none before its time by the database's clock, and no timestamp in its future
    for occurrence in occurrences:
        if occurrence.rule_id.startswith("every"):
            assert occurrence.claimed_at >= due(occurrence.slot) - ROUNDING, occurrence
        assert occurrence.claimed_at <= database_now, occurrence
    for run in runs:
        slot = datetime.fromisoformat(run.trigger["slot"])
        assert due(slot) - ROUNDING <= run.queued_at <= database_now, run

    # and the beats that are off say so, in their logs and in /metrics
    assert logged_offset(fast) == pytest.approx(90, abs=1), fast.output()[-2000:]
    assert logged_offset(slow) == pytest.approx(-90, abs=1), slow.output()[-2000:]
    assert logged_offset(normal) is None
    lines = api.get("/metrics").text.splitlines()
    gauge = {
        pid: float(line.rsplit(" ", 1)[1])
        for line in lines
        if line.startswith("ade_beat_clock_offset_seconds{")
        for pid in (fast.pid, slow.pid, normal.pid)
        if f":{pid}:" in line
    }
    assert gauge[fast.pid] == pytest.approx(90, abs=1)
    assert gauge[slow.pid] == pytest.approx(-90, abs=1)
    assert gauge[normal.pid] == pytest.approx(0, abs=0.5)
