"""What `bench/beat.py` reads and writes in the scratch database around a boundary: when the
beats are ready, when a slot's runs are queued and its outcomes recorded, the exactly-once check,
and the bench's own writes that keep boundaries comparable (housekeeping claimed ahead, earlier
runs finished)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, text

from ade_tasks.housekeeping import HOUSEKEEPING
from bench.beat_processes import READY_MARGIN_SECONDS, Child, iso
from bench.beat_results import POLL_SECONDS
from bench.common import BenchError, tail

_READY = text(
    "SELECT coalesce(sum(1 + duplicate_claims), 0) FROM schedule_occurrences"
    " WHERE rule_id = :housekeeping AND cron = 'prune' AND claimed_by <> 'bench'"
)
_BACKENDS = text(
    "SELECT pid FROM pg_stat_activity"
    " WHERE datname = current_database() AND pid <> pg_backend_pid()"
)
_RUNS_OF_SLOT = "FROM runs WHERE trigger->>'slot' = :slot_text"
_OCCURRENCES_OF_SLOT = "FROM schedule_occurrences WHERE slot = :slot AND rule_id <> :housekeeping"
_SHARDS_OF_SLOT = text(
    "SELECT count(*), coalesce(sum(losers), 0) FROM schedule_shards WHERE slot = :slot"
)


def _scalar(engine: Engine, sql: str, **params: Any) -> Any:
    with engine.connect() as connection:
        return connection.execute(text(sql), params).scalar_one()


def housekeeping_claims(engine: Engine) -> int:
    """Claims of the hourly housekeeping slot so far, won or lost (see `wait_beats_ready`)."""
    with engine.connect() as connection:
        return int(connection.execute(_READY, {"housekeeping": HOUSEKEEPING}).scalar_one())


def wait_beats_ready(
    engine: Engine, beats: Sequence[Child], boundary: float, claims_before: int = 0
) -> float:
    """Until every beat has claimed the hourly housekeeping slot (it does so right after its
    first schedule refresh, so it has loaded the rules): `len(beats)` claims more than the
    `claims_before` earlier beats on the same database made. Returns the seconds it took."""
    started = time.time()
    deadline = boundary - READY_MARGIN_SECONDS
    while True:
        for beat in beats:
            beat.check_alive()
        claims = housekeeping_claims(engine) - claims_before
        if claims >= len(beats):
            return time.time() - started
        if time.time() > deadline:
            logs = "\n".join(f"--- {b.name}:\n{tail(b.log, 8)}" for b in beats)
            raise BenchError(
                f"only {claims} of {len(beats)} beats had loaded the rules "
                f"{READY_MARGIN_SECONDS:g}s before the boundary {iso(boundary)}\n{logs}"
            )
        time.sleep(0.2)


def wait_runs(engine: Engine, count: int, slot: str, deadline: float) -> float:
    """Poll until `count` runs of `slot` exist; returns when that was seen (epoch seconds)."""
    for _ in range(int(3600 / POLL_SECONDS)):
        with engine.connect() as connection:
            total = connection.execute(text("SELECT count(*) FROM runs")).scalar_one()
            # Runs of a later minute count only if the measured one is slower than a minute.
            if total >= count:
                total = connection.execute(
                    text(f"SELECT count(*) {_RUNS_OF_SLOT}"), {"slot_text": slot}
                ).scalar_one()
        if total >= count:
            return time.time()
        if time.time() > deadline:
            raise BenchError(f"only {total} of {count} runs were queued before the deadline")
        time.sleep(POLL_SECONDS)
    raise BenchError("polling for runs did not end")


def wait_settled(engine: Engine, slot: datetime, count: int, beats: int, deadline: float) -> float:
    """Until every occurrence of the slot has its outcome recorded (the beats record a batch's
    outcomes after dispatching all of it) and every other beat has tried (and lost) each shard
    it did not win, so the boundary's work is done and the count of losing claims is complete;
    returns when that was seen (epoch seconds). A loser that claims after all (its view of the
    rules differs from the winner's) leaves the losses short: then 5 s after the outcomes."""
    params = {"slot": slot, "housekeeping": HOUSEKEEPING}
    settled_sql = text(
        f"SELECT count(*) FILTER (WHERE outcome <> 'claimed') {_OCCURRENCES_OF_SLOT}"
    )
    recorded_at: float | None = None
    for _ in range(int(3600 / POLL_SECONDS)):
        with engine.connect() as connection:
            recorded = connection.execute(settled_sql, params).scalar_one()
            shards, losers = connection.execute(_SHARDS_OF_SLOT, params).one()
        now = time.time()
        if recorded_at is None and recorded >= count:
            recorded_at = now
        if recorded_at is not None and (losers >= (beats - 1) * shards or now > recorded_at + 5):
            return now
        if now > deadline:
            if recorded_at is not None:
                return now
            raise BenchError(f"only {recorded} of {count} outcomes were recorded by the deadline")
        time.sleep(POLL_SECONDS)
    raise BenchError("polling for outcomes did not end")


def claim_housekeeping(engine: Engine, slot: datetime) -> int:
    """Claim, as the bench, the slot `slot` of every housekeeping job the beats have claimed
    before, so that none of them runs the job inside a measured boundary: with one beat the
    minute's jobs (the recovery and run.finished sweeps, the rollup) run after its last slot,
    outside the window, while with three one beat runs them beside the others' firing. Kept out
    of both sides alike, the window holds the boundary's work; the beats still make (and lose)
    their claims of the jobs. Returns how many jobs were claimed."""
    sql = text(
        "INSERT INTO schedule_occurrences"
        " (rule_id, trigger_index, cron, slot, claimed_by, claimed_at, outcome, duplicate_claims)"
        " SELECT DISTINCT rule_id, 0, cron, CAST(:slot AS timestamptz), 'bench', now(), 'fired', 0"
        " FROM schedule_occurrences WHERE rule_id = :housekeeping"
        " ON CONFLICT DO NOTHING"
    )
    with engine.begin() as connection:
        result = connection.execute(sql, {"slot": slot, "housekeeping": HOUSEKEEPING})
    return int(result.rowcount or 0)


def finish_runs(engine: Engine) -> int:
    """Mark every queued run succeeded, as the workers a cluster has would have: the schedule's
    default overlap policy (`skip`) would otherwise skip the next boundary's runs of the same
    rules, and the recovery sweep would re-send them. Returns how many."""
    sql = text(
        "UPDATE runs SET status = 'succeeded', started_at = queued_at, finished_at = now()"
        " WHERE status = 'queued'"
    )
    with engine.begin() as connection:
        return int(connection.execute(sql).rowcount or 0)


def runs_of_slot(engine: Engine, slot: datetime) -> int:
    """How many runs the slot has (the beats must not have fired it before it is measured)."""
    return int(_scalar(engine, f"SELECT count(*) {_RUNS_OF_SLOT}", slot_text=slot.isoformat()))


@dataclass
class OnceCheck:
    """Exactly-once figures for the measured slot."""

    runs: int
    queued: int
    distinct_rules: int
    distinct_keys_all: int
    runs_all: int
    occurrences: int
    fired: int
    linked: int
    duplicate_claims: int
    shards: int
    shard_losers: int
    by_beat: dict[str, int]

    def ok(self, count: int) -> bool:
        return (
            self.runs == self.queued == self.distinct_rules == count
            and self.occurrences == self.fired == count
            and self.linked == count
            and self.distinct_keys_all == self.runs_all
        )

    def describe(self) -> str:
        return (
            f"runs of the slot {self.runs} ({self.queued} queued, {self.distinct_rules} distinct"
            f" rules), all runs "
            f"{self.runs_all} ({self.distinct_keys_all} distinct rule+slot), occurrences "
            f"{self.occurrences} (fired {self.fired}, linked to those runs {self.linked})"
        )


def check_once(engine: Engine, slot: datetime) -> OnceCheck:
    params = {"slot": slot, "slot_text": slot.isoformat(), "housekeeping": HOUSEKEEPING}
    with engine.connect() as connection:

        def one(sql: str) -> Any:
            return connection.execute(text(sql), params).one()

        runs, queued, distinct_rules = one(
            "SELECT count(*), count(*) FILTER (WHERE status = 'queued'), count(DISTINCT rule_id)"
            f" {_RUNS_OF_SLOT}"
        )
        runs_all, keys_all = one(
            "SELECT count(*), count(DISTINCT (rule_id, trigger->>'slot')) FROM runs"
        )
        shards, shard_losers = connection.execute(_SHARDS_OF_SLOT, params).one()
        occurrences, fired, duplicates = one(
            "SELECT count(*), count(*) FILTER (WHERE outcome = 'fired'),"
            f" coalesce(sum(duplicate_claims), 0) {_OCCURRENCES_OF_SLOT}"
        )
        (linked,) = one(
            "SELECT count(*) FROM schedule_occurrences o JOIN runs r ON r.id = o.run_id"
            " AND r.rule_id = o.rule_id AND r.trigger->>'slot' = :slot_text"
            " WHERE o.slot = :slot AND o.rule_id <> :housekeeping"
        )
        by_beat: dict[str, int] = dict(
            connection.execute(
                text(f"SELECT claimed_by, count(*) {_OCCURRENCES_OF_SLOT} GROUP BY claimed_by"),
                params,
            ).all()
        )
    return OnceCheck(
        runs,
        queued,
        distinct_rules,
        keys_all,
        runs_all,
        occurrences,
        fired,
        linked,
        duplicates,
        shards,
        shard_losers,
        by_beat,
    )


def queued_offsets(engine: Engine, slot: datetime) -> list[float]:
    """Seconds from the slot to each of its runs' queued_at."""
    sql = f"SELECT queued_at {_RUNS_OF_SLOT}"
    with engine.connect() as connection:
        rows = connection.execute(text(sql), {"slot_text": slot.isoformat()}).scalars().all()
    return [(value - slot).total_seconds() for value in rows]


def claim_span(engine: Engine, slot: datetime) -> tuple[float, float]:
    """Seconds from the slot to the first and the last claim of its occurrences."""
    sql = f"SELECT min(claimed_at), max(claimed_at) {_OCCURRENCES_OF_SLOT}"
    with engine.connect() as connection:
        first, last = connection.execute(
            text(sql), {"slot": slot, "housekeeping": HOUSEKEEPING}
        ).one()
    return (first - slot).total_seconds(), (last - slot).total_seconds()


def cpu_groups(
    engine: Engine, beats: Sequence[Child], seen: Sequence[int] = ()
) -> dict[str, list[int]]:
    """The processes whose CPU is counted: the beats, and the scratch database's backends
    (with those `seen` before, which may have exited since)."""
    with engine.connect() as connection:
        backends = sorted({*seen, *connection.execute(_BACKENDS).scalars()})
    return {"beats": [b.proc.pid for b in beats], "postgres": backends}


def beat_split(by_beat: Mapping[str, int], beats: Sequence[Child]) -> str:
    """How many items each beat won, by the beats' names."""
    return ", ".join(f"{_beat_label(beat_id, beats)} {n}" for beat_id, n in sorted(by_beat.items()))


def _beat_label(beat_id: str, beats: Sequence[Child]) -> str:
    pid = beat_id.split(":")[1] if beat_id.count(":") >= 2 else ""
    for child in beats:
        if str(child.proc.pid) == pid:
            return child.name
    return beat_id
