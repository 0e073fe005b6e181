"""The sides of `make bench` (bench/dispatch.py): what each measures in a burst (throughput) and
a round trip (latency), and what it reports. A raw side sends a task by name and waits for the
task's own record of its finish in Redis; the ADE side dispatches runs and waits for the ADE
worker's record of each finished run, then reads the runs' timestamps from PostgreSQL."""

from __future__ import annotations

import contextlib
import math
import os
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

import redis
from celery import Celery
from sqlalchemy import Engine, bindparam, text

from ade_tasks.db.engine import SessionFactory
from ade_tasks.runs.dispatch import dispatch
from ade_tasks.runs.trigger_events import TriggerEvent
from ade_workers.celery.app import CelerySender
from bench.common import BenchError, percentile
from bench.dispatch_workers import CpuMeter

RULE_ID = "bench-true"
#: The raw worker's queue; the ADE worker consumes ADE's own (`ade.builtin`) beside it.
RAW_QUEUE = "bench.raw"
#: "ade" gives the raw workers and senders ADE's Redis transport, not kombu's (`--raw-transport`).
RAW_TRANSPORT_ENV = "BENCH_RAW_TRANSPORT"
#: Where the ADE worker's app pushes the id of each run it finished (`ade_worker_app`).
ADE_FINISHED_KEY = "bench:ade:finished"

_recorder_lock = threading.Lock()
_recorder_client: tuple[int, redis.Redis] | None = None


def recorder(url: str) -> redis.Redis:
    """This process's Redis client (rebuilt after a fork, like ADE's database engine)."""
    global _recorder_client
    with _recorder_lock:
        if _recorder_client is None or _recorder_client[0] != os.getpid():
            _recorder_client = (os.getpid(), redis.Redis.from_url(url))
        return _recorder_client[1]


def record_finish(url: str, key: str, seq: int) -> None:
    """Push task `seq`'s finish time (epoch seconds) to the list `key`, where its side waits."""
    recorder(url).rpush(key, f"{seq} {time.time()!r}")


@dataclass
class Result:
    """One side of the comparison: its throughput bursts (count, seconds) and its sequential
    latencies (seconds), `trips_per_round` of them after each burst."""

    label: str
    unit: str
    bursts: list[tuple[int, float]] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    trips_per_round: int = 0

    @property
    def rate(self) -> float:
        """Throughput over all bursts: their items over their time."""
        seconds = sum(s for _, s in self.bursts)
        return sum(c for c, _ in self.bursts) / seconds if seconds > 0 else math.inf

    @property
    def round_rates(self) -> list[float]:
        return [count / seconds if seconds > 0 else math.inf for count, seconds in self.bursts]

    @property
    def round_p50s(self) -> list[float]:
        """The p50 of each round's round trips (all of them as one round if not split)."""
        size = self.trips_per_round or len(self.latencies) or 1
        return [
            percentile(self.latencies[start : start + size], 50)
            for start in range(0, len(self.latencies), size)
        ]

    @property
    def p50(self) -> float:
        return percentile(self.latencies, 50)

    @property
    def p95(self) -> float:
        return percentile(self.latencies, 95)


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


def _check_deadline(deadline: float, doing: str) -> None:
    if time.monotonic() > deadline:
        raise BenchError(f"the deadline passed while {doing}; see --timeout")


def _pop(store: redis.Redis, key: str, count: int, deadline: float, doing: str) -> list[str]:
    """Pop `count` records from the list `key`, waiting for them (a blocking pop, no polling)."""
    records: list[str] = []
    while len(records) < count:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise BenchError(f"only {len(records)} of {count} finished while {doing}")
        item = store.blpop([key], timeout=min(remaining, 1.0))
        if item is not None:
            record = item[1]
            records.append(record.decode() if isinstance(record, bytes) else record)
    return records


class RawSide:
    """A baseline task sent by name to a baseline worker's `queue` (the raw one's unless told);
    each task records its finish time."""

    def __init__(
        self,
        app: Celery,
        store: redis.Redis,
        task: str,
        label: str,
        worker_pgid: int,
        queue: str = RAW_QUEUE,
    ) -> None:
        self.app, self.store, self.task, self.queue = app, store, task, queue
        self.result = Result(label, "tasks")
        self.meter = CpuMeter(worker_pgid)

    def _send(self, key: str, seq: int) -> None:
        self.app.send_task(self.task, args=[key, seq], queue=self.queue)

    def _finished(self, key: str, count: int, deadline: float) -> dict[int, float]:
        """sequence number -> finish time (epoch seconds) of `count` tasks recorded at `key`."""
        records = _pop(self.store, key, count, deadline, f"running {self.task}")
        return {int(seq): float(stamp) for seq, stamp in (r.split() for r in records)}

    def burst(self, count: int, deadline: float, *, measured: bool = True) -> None:
        """Send `count` tasks back to back; measured: from the first send to the last finish."""
        key = f"bench:{self.task}:burst:{uuid.uuid4().hex}"
        with self.meter.measuring() if measured else contextlib.nullcontext():
            started = time.time()
            for seq in range(count):
                _check_deadline(deadline, "sending a burst")
                self._send(key, seq)
            finished = self._finished(key, count, deadline)
        if measured:
            self.result.bursts.append((count, max(finished.values()) - started))

    def trip(self, deadline: float) -> None:
        """One task, sent when nothing else is in flight: send -> finished."""
        key = f"bench:{self.task}:trip:{uuid.uuid4().hex}"
        sent = time.time()
        self._send(key, 0)
        self.result.latencies.append(self._finished(key, 1, deadline)[0] - sent)

    def finish(self, deadline: float) -> Result:
        del deadline  # every figure is in already
        self.result.notes.append(self.meter.note(sum(c for c, _ in self.result.bursts), "task"))
        return self.result


def _epoch(value: datetime) -> float:
    return (value if value.tzinfo else value.replace(tzinfo=UTC)).timestamp()


def _check_outcomes(engine: Engine, ids: Sequence[str]) -> dict[str, dict[str, Any]]:
    """The timestamps of the runs (and of their step); BenchError if any did not succeed."""
    query = text(
        "SELECT r.id, r.status, r.error, r.queued_at, r.started_at, r.finished_at,"
        " s.started_at AS step_started_at, s.finished_at AS step_finished_at"
        " FROM runs r LEFT JOIN run_steps s ON s.run_id = r.id AND s.index = 0"
        " WHERE r.id IN :ids"
    ).bindparams(bindparam("ids", expanding=True))
    with engine.connect() as connection:
        rows = {row.id: row._asdict() for row in connection.execute(query, {"ids": list(ids)})}
    bad = [row for row in rows.values() if row["status"] != "succeeded"]
    if bad or len(rows) != len(ids):
        sample = "; ".join(f"{row['id']}: {row['status']} ({row['error']})" for row in bad[:3])
        raise BenchError(f"{len(bad)} of {len(ids)} ADE runs did not succeed: {sample}")
    return rows


class AdeSide:
    """Runs of the rule `bench-true`, created by `dispatch()` here and executed by the ADE
    worker, whose app pushes each finished run's id (`ade_worker_app`). Times come from the
    runs' rows: trigger -> `finished_at`."""

    def __init__(
        self,
        engine: Engine,
        session_factory: SessionFactory,
        sender: CelerySender,
        store: redis.Redis,
        worker_pgid: int,
    ) -> None:
        self.engine, self.session_factory, self.sender, self.store = (
            engine, session_factory, sender, store,
        )  # fmt: skip
        self.result = Result("ADE run-command true", "runs")
        self.meter = CpuMeter(worker_pgid)
        self.dispatching = 0.0  # seconds the bursts spent in dispatch() calls
        self.trips: dict[str, tuple[float, float]] = {}  # run id -> (dispatch called, returned)

    def _dispatch(self) -> str:
        result = dispatch(
            self.session_factory, self.sender, RULE_ID, TriggerEvent.manual(by="bench")
        )
        if not result.sent:
            raise BenchError(f"run {result.run.id} was not sent: {result.send_error}")
        return result.run.id

    def _wait(self, ids: Sequence[str], deadline: float) -> None:
        finished = _pop(self.store, ADE_FINISHED_KEY, len(ids), deadline, "running ADE runs")
        if sorted(finished) != sorted(ids):
            raise BenchError(f"the ADE worker finished other runs than these: {finished[:3]}...")

    def burst(self, count: int, deadline: float, *, measured: bool = True) -> None:
        """Dispatch `count` runs back to back; measured: from the first dispatch() call to the
        last run's `finished_at`."""
        with self.meter.measuring() if measured else contextlib.nullcontext():
            started = time.time()
            ids = []
            for _ in range(count):
                _check_deadline(deadline, "dispatching a burst")
                ids.append(self._dispatch())
            dispatched = time.time()
            self._wait(ids, deadline)
        rows = _check_outcomes(self.engine, ids)
        if measured:
            last = max(_epoch(row["finished_at"]) for row in rows.values())
            self.result.bursts.append((count, last - started))
            self.dispatching += dispatched - started

    def trip(self, deadline: float) -> None:
        """One run, dispatched when nothing else is in flight: its times are read at `finish`."""
        called = time.time()
        run_id = self._dispatch()
        self.trips[run_id] = (called, time.time())
        self._wait([run_id], deadline)

    def finish(self, deadline: float) -> Result:
        del deadline
        result, calls = self.result, self.trips
        rows = _check_outcomes(self.engine, list(calls))
        result.latencies = [
            _epoch(rows[i]["finished_at"]) - called for i, (called, _) in calls.items()
        ]
        dispatched = sum(c for c, _ in result.bursts)
        result.notes.append(self.meter.note(dispatched, "run"))
        result.notes.append(
            f"dispatch() alone: {dispatched / self.dispatching:.0f} calls/s in the bursts"
        )

        def stage(fn: Callable[[str, dict[str, Any]], float]) -> str:
            return ms(percentile([fn(i, row) for i, row in rows.items()], 50))

        result.notes.append(
            "p50 breakdown: dispatch() call "
            + stage(lambda i, _: calls[i][1] - calls[i][0])
            + ", dispatch returned -> run claimed "
            + stage(lambda i, r: _epoch(r["started_at"]) - calls[i][1])
            + ", claimed -> step started "
            + stage(lambda _, r: _epoch(r["step_started_at"]) - _epoch(r["started_at"]))
            + ", step (`true`) "
            + stage(lambda _, r: _epoch(r["step_finished_at"]) - _epoch(r["step_started_at"]))
            + ", step finished -> run finished "
            + stage(lambda _, r: _epoch(r["finished_at"]) - _epoch(r["step_finished_at"]))
        )
        return result


class Side(Protocol):
    def burst(self, count: int, deadline: float, *, measured: bool = True) -> None: ...
    def trip(self, deadline: float) -> None: ...
    def finish(self, deadline: float) -> Result: ...
