"""The one-shot case of `bench/beat.py`: N scheduled runs due in the same second, the same beats.

Each of the bench's N rules gets one scheduled manual run due at the same whole second, stored
before the beats start exactly as `POST /api/v1/rules/{id}/runs` with `run_at` stores it
(`ade_tasks.db.one_shots.schedule_manual`). A rule's `run_at` trigger is stored in the same
table and fired by the same claims (`OneShotFirer`), so this times the beats' one-shot path.
The second is `ONCE_AFTER_SECONDS` after the cron boundary, when the cron slot has settled and
well before the next one, so the two batches do not share the beats.

The baseline is the cron slot measured in the same run: the same N rules, the same three beat
processes, the same database and broker, N items due at one instant, timed the same way (from
when they were due to `runs.queued_at`). The ratio one-shot / cron is printed for p50 and p99.
With a few hundred items both are dominated by where the beats' 1 s tick falls in the due
second, so the ratio means something only at the default size.

Exactly once: N scheduled runs, each `fired` with its run, and for every scheduled-run id one
run (`runs.trigger->>'scheduled_run'`), N in all.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Engine, text

from ade_tasks.db.engine import create_session_factory
from ade_tasks.db.one_shots import schedule_manual
from bench.beat_processes import Child, CpuSample, cpu_note, iso, plan_boundary, sleep_until
from bench.beat_results import Result, offsets_result, secs
from bench.beat_slot import beat_split, cpu_groups
from bench.common import BenchError

#: The one-shots are due this long after the cron boundary (the cron slot settles in ~12 s).
ONCE_AFTER_SECONDS = 30
#: Storing N scheduled runs may take this long; the boundary is planned that much further out.
STORE_BUDGET_SECONDS = 25.0
KEY_PREFIX = "bench-once-"
POLL_SECONDS = 0.05

_OURS = "FROM scheduled_runs s WHERE s.key LIKE 'manual:' || :prefix || '%'"
_RUNS = "FROM runs r WHERE r.trigger->>'scheduled_run' IS NOT NULL"
_OFFSETS = (
    "SELECT extract(epoch FROM r.queued_at - s.run_at) FROM scheduled_runs s"
    " JOIN runs r ON r.trigger->>'scheduled_run' = s.id"
    " WHERE s.key LIKE 'manual:' || :prefix || '%'"
)


def store_one_shots(engine: Engine, rule_ids: Sequence[str], due: datetime) -> float:
    """One scheduled manual run per rule, all due at `due`; returns the seconds it took."""
    started = time.monotonic()
    with create_session_factory(engine).begin() as session:
        for rule_id in rule_ids:
            schedule_manual(
                session,
                rule_id,
                due,
                inputs={},
                requested_by="bench",
                key=f"{KEY_PREFIX}{rule_id}",
            )
    return time.monotonic() - started


def _one(engine: Engine, sql: str) -> Any:
    with engine.connect() as connection:
        return connection.execute(text(sql), {"prefix": KEY_PREFIX}).one()


def wait_queued(engine: Engine, count: int, deadline: float, check: Callable[[], None]) -> float:
    """Poll until `count` one-shot runs exist; returns when that was seen (epoch seconds)."""
    for _ in range(int(3600 / POLL_SECONDS)):
        (total,) = _one(engine, f"SELECT count(*) {_RUNS}")
        if total >= count:
            return time.time()
        check()
        if time.time() > deadline:
            raise BenchError(f"only {total} of {count} one-shot runs were queued by the deadline")
        time.sleep(POLL_SECONDS)
    raise BenchError("polling for one-shot runs did not end")


def wait_settled(engine: Engine, count: int, deadline: float) -> float:
    """Until every scheduled run has its outcome recorded (the beats settle a batch after
    dispatching it); returns when that was seen (epoch seconds)."""
    for _ in range(int(3600 / POLL_SECONDS)):
        (settled,) = _one(
            engine, f"SELECT count(*) {_OURS} AND s.status NOT IN ('pending', 'claimed')"
        )
        if settled >= count:
            return time.time()
        if time.time() > deadline:
            raise BenchError(f"only {settled} of {count} scheduled runs settled by the deadline")
        time.sleep(POLL_SECONDS)
    raise BenchError("polling for settled scheduled runs did not end")


@dataclass
class OneShotCheck:
    """Exactly-once figures for the one-shot batch."""

    scheduled: int
    fired: int
    linked: int  # scheduled runs whose run_id is a run recording that scheduled-run id
    runs: int
    queued: int
    distinct_ids: int  # distinct scheduled-run ids among those runs
    most_per_id: int  # the most runs any scheduled-run id has
    by_beat: dict[str, int]

    def ok(self, count: int) -> bool:
        return (
            self.scheduled == self.fired == self.linked == count
            and self.runs == self.queued == self.distinct_ids == count
            and self.most_per_id == 1
        )

    def describe(self) -> str:
        return (
            f"scheduled runs {self.scheduled} (fired {self.fired}, linked to their run "
            f"{self.linked}), runs {self.runs} ({self.queued} queued, {self.distinct_ids} distinct"
            f" scheduled-run ids, at most {self.most_per_id} per id)"
        )


def check_one_shots(engine: Engine) -> OneShotCheck:
    """Count the scheduled runs and the runs of each scheduled-run id."""
    scheduled, fired = _one(
        engine, f"SELECT count(*), count(*) FILTER (WHERE s.status = 'fired') {_OURS}"
    )
    (linked,) = _one(
        engine,
        "SELECT count(*) FROM scheduled_runs s JOIN runs r ON r.id = s.run_id"
        " AND r.trigger->>'scheduled_run' = s.id WHERE s.key LIKE 'manual:' || :prefix || '%'",
    )
    runs, queued, distinct_ids = _one(
        engine,
        "SELECT count(*), count(*) FILTER (WHERE r.status = 'queued'),"
        f" count(DISTINCT r.trigger->>'scheduled_run') {_RUNS}",
    )
    (most,) = _one(
        engine,
        "SELECT coalesce(max(n), 0) FROM (SELECT count(*) AS n"
        f" {_RUNS} GROUP BY r.trigger->>'scheduled_run') per_id",
    )
    with engine.connect() as connection:
        by_beat = dict(
            connection.execute(
                text(f"SELECT s.claimed_by, count(*) {_OURS} GROUP BY s.claimed_by"),
                {"prefix": KEY_PREFIX},
            ).all()
        )
    return OneShotCheck(scheduled, fired, linked, runs, queued, distinct_ids, most, by_beat)


def queued_offsets(engine: Engine) -> list[float]:
    """Seconds from each scheduled run's run_at to its run's queued_at."""
    with engine.connect() as connection:
        rows = connection.execute(text(_OFFSETS), {"prefix": KEY_PREFIX}).scalars().all()
    return [float(value) for value in rows]


def claim_span(engine: Engine, due: datetime) -> tuple[float, float]:
    """Seconds from `due` to the first and the last claim of the scheduled runs."""
    first, last = _one(engine, f"SELECT min(s.claimed_at), max(s.claimed_at) {_OURS}")
    return (first - due).total_seconds(), (last - due).total_seconds()


@dataclass
class OneShots:
    """The one-shot case: its figures, its exactly-once check, and when they were due."""

    result: Result
    check: OneShotCheck
    due: float


def plan_one_shots(
    engine: Engine, rule_ids: Sequence[str], lead: float, later: float = 0.0
) -> tuple[float, float]:
    """Plan the first boundary with room to store one one-shot per rule due
    `ONCE_AFTER_SECONDS` after the boundary `later` seconds after it (the measured one), and
    store them; returns (first boundary, due) as epoch seconds."""
    boundary = plan_boundary(lead + STORE_BUDGET_SECONDS)
    due = boundary + later + ONCE_AFTER_SECONDS
    took = store_one_shots(engine, rule_ids, datetime.fromtimestamp(due, UTC))
    print(f"  stored {len(rule_ids)} one-shots due at {iso(due)} UTC in {took:.1f} s", flush=True)
    if boundary - time.time() < lead:
        raise BenchError(
            f"storing {len(rule_ids)} one-shots took {took:.1f} s, more than the"
            f" {STORE_BUDGET_SECONDS:g} s planned; the beats cannot start in time"
        )
    return boundary, due


def measure_one_shots(
    engine: Engine, beats: Sequence[Child], count: int, due: float, deadline: float
) -> OneShots:
    """Time the one-shots due at `due` (epoch seconds) from their run_at to queued."""

    def check_alive() -> None:
        for beat in beats:
            beat.check_alive()

    if time.time() > due - 1:
        raise BenchError(
            f"the cron slot had not settled {ONCE_AFTER_SECONDS - 1} s after its"
            " boundary, so the one-shots would share the beats with it"
        )
    sleep_until(due - 0.2)
    groups = cpu_groups(engine, beats)
    before = CpuSample.take(groups)
    seen = wait_queued(engine, count, due + deadline, check_alive)
    spent = CpuSample.take(cpu_groups(engine, beats, groups["postgres"])).since(before)
    settled = wait_settled(engine, count, due + deadline)
    check_alive()
    check = check_one_shots(engine)
    offsets = queued_offsets(engine)
    if not offsets:
        raise BenchError("no one-shot run is linked to its scheduled run")
    first_claim, last_claim = claim_span(engine, datetime.fromtimestamp(due, UTC))
    cpu_ms = (spent["beats"] + spent["postgres"]) * 1000 / count
    result = offsets_result(f"ADE one-shots, {len(beats)} beats", count, offsets, cpu_ms)
    result.notes += [
        f"due {iso(due)} UTC; last run seen by the 50 ms poll at {secs(seen - due)}, all"
        f" settled at {secs(settled - due)}; claimed_at from {secs(first_claim)} to"
        f" {secs(last_claim)}",
        f"scheduled runs by beat: {beat_split(check.by_beat, beats)}",
        cpu_note(spent, count, "one-shot"),
    ]
    return OneShots(result, check, due)
