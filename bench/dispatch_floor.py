"""The durable commits' floor under ADE's p50 in `make bench` (bench/dispatch.py): one-row
INSERTs timed on the scratch database once the workers stopped, and the least ADE's p50 can be
while a run's two commits before its step stay durable."""

from __future__ import annotations

import time
from dataclasses import dataclass

from sqlalchemy import Engine

from bench.common import percentile
from bench.dispatch_sides import Result

#: Quiet before each probed commit: about the stretch before a run's claim in the latency loop
#: (from its dispatch's return: the send, the broker, the hand-off to a pool process).
PROBE_GAP_SECONDS = 0.002


@dataclass
class CommitProbe:
    """Latency of one durable commit on the bench's database (a one-row INSERT, autocommit,
    PostgreSQL's `synchronous_commit` as configured): each after `PROBE_GAP_SECONDS` of quiet,
    as a run's claim comes after its INSERT in the latency loop, and back to back."""

    after_idle: list[float]
    back_to_back: list[float]


def probe_commits(engine: Engine, count: int) -> CommitProbe:
    """Time `count` commits of each kind, by the driver (as the run path writes: `db.direct`).

    The probe's row has one index where a run's has nine, so it undercuts a run's commit: the
    floor computed from it (`p50_floor`) is a lower bound."""
    pooled = engine.raw_connection()
    try:
        connection = pooled.driver_connection
        assert connection is not None
        connection.autocommit = True
        with connection.cursor() as cursor:
            cursor.execute(
                "CREATE TABLE IF NOT EXISTS bench_commit_probe (id bigserial PRIMARY KEY)"
            )

            def commit_after(gap: float) -> float:
                time.sleep(gap)
                started = time.perf_counter()
                cursor.execute("INSERT INTO bench_commit_probe DEFAULT VALUES")
                return time.perf_counter() - started

            after_idle = [commit_after(PROBE_GAP_SECONDS) for _ in range(count)]
            back_to_back = [commit_after(0) for _ in range(count)]
        connection.autocommit = False
    finally:
        pooled.close()
    return CommitProbe(after_idle, back_to_back)


#: Durable commits on an ADE run's path from its trigger to its step's start that raw Celery
#: does not make: the run's INSERT (before the send) and the worker's claim (before the step).
COMMITS_BEFORE_THE_STEP = 2


def p50_floor(true: Result, commits: CommitProbe) -> float:
    """The least ADE's p50 can be while its two commits stay durable: a raw Celery task that
    runs `true` (send, broker, worker, pool process, the command) plus the two commits, each
    after a quiet stretch as in the latency loop. Everything else ADE does on the way (the rule's
    admission, the containment supervisor, the plan) comes on top."""
    return true.p50 + COMMITS_BEFORE_THE_STEP * percentile(commits.after_idle, 50)
