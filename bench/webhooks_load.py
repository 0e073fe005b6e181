"""The webhook benchmark's load: unique signed ~5 KB `pull_request.opened` deliveries sent back to
back over keep-alive connections (`bench.rawhttp` on uvloop), each timed, with the CPU every
process group spent in the measured window.

A delivery is the test fixture with URL fields and the head/base copies of the repository
dropped and `pull_request.body` padded to size, with its own X-GitHub-Delivery and a counter in
the body so that neither side's dedup refuses it."""

from __future__ import annotations

import argparse
import asyncio
import collections
import hashlib
import hmac
import itertools
import json
import os
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import uvloop

from bench import rawhttp
from bench.common import (
    BenchError,
    machine_idle_seconds,
    percentile,
    process_cpu_seconds,
    process_tree_cpu_seconds,
)
from bench.servers import REPO_ROOT

FIXTURE = REPO_ROOT / "tests" / "fixtures" / "github" / "pull_request" / "opened.payload.json"
PATH = "/api/v1/webhooks/github"  # ADE's route; the minimal endpoint serves the same
FILLER = b"Lorem ipsum dolor sit amet, consectetur adipiscing elit. "
REQUEST_TIMEOUT = 10.0


# --- deliveries -------------------------------------------------------------------------------


def trimmed_payload() -> dict[str, Any]:
    """The fixture without URL fields and without head/base's copies of the repository."""

    def trim(value: Any) -> Any:
        if isinstance(value, dict):
            return {
                k: trim(v) for k, v in value.items() if k == "html_url" or not k.endswith("_url")
            }
        if isinstance(value, list):
            return [trim(v) for v in value]
        return value

    payload: dict[str, Any] = json.loads(FIXTURE.read_text())
    for side in ("head", "base"):
        payload["pull_request"][side].pop("repo", None)
    return dict(trim(payload))


class Deliveries:
    """Signed `pull_request.opened` deliveries of exactly `size` bytes, each one unique."""

    def __init__(self, secret: bytes, size: int) -> None:
        self.secret = secret
        self.run = uuid.uuid4().hex[:8]
        payload = trimmed_payload()
        payload["pull_request"]["body"] = "@BODY@"
        head, _, rest = json.dumps(payload, separators=(",", ":")).encode().partition(b"@BODY@")
        room = size - len(head) - len(rest) - len(self._label(0))
        if room < 0:
            raise BenchError(f"a delivery cannot be as small as {size} bytes")
        self._head = head
        self._rest = (FILLER * (room // len(FILLER) + 1))[:room] + rest
        json.loads(self.make(0)[2])  # still a JSON document

    def _label(self, seq: int) -> bytes:
        return f"Benchmark delivery {self.run}-{seq:09d}. ".encode()

    def make(self, seq: int) -> tuple[str, dict[str, str], bytes]:
        """(delivery id, headers, body) of the seq-th delivery."""
        delivery = str(uuid.uuid4())
        body = self._head + self._label(seq) + self._rest
        headers = {
            "content-type": "application/json",
            "user-agent": "GitHub-Hookshot/bench",
            "x-github-event": "pull_request",
            "x-github-delivery": delivery,
            "x-hub-signature-256": "sha256="
            + hmac.new(self.secret, body, hashlib.sha256).hexdigest(),
        }
        return delivery, headers, body


# --- CPU --------------------------------------------------------------------------------------


@dataclass
class CpuSample:
    """CPU seconds of some process groups at one moment (Linux /proc)."""

    wall: float
    idle: float
    client: float
    groups: dict[str, float]


class CpuMeter:
    """Samples the CPU seconds of named processes: name -> pid, and whether to add its children
    (running or exited: PostgreSQL's backends come and go)."""

    def __init__(self, processes: Mapping[str, tuple[int, bool]]) -> None:
        self.processes = processes

    def take(self) -> CpuSample:
        groups = {}
        for name, (pid, tree) in self.processes.items():
            cpu = process_tree_cpu_seconds(pid) if tree else process_cpu_seconds(pid)
            if cpu is None:
                raise BenchError(f"{name} (pid {pid}) is gone")
            groups[name] = cpu
        return CpuSample(time.monotonic(), machine_idle_seconds(), time.process_time(), groups)


def cpu_spent(before: CpuSample, after: CpuSample) -> dict[str, float]:
    """CPU seconds per group between two samples, then this process (the load generator), idle,
    everything else, and the capacity."""
    spent = {name: cpu - before.groups[name] for name, cpu in after.groups.items()}
    spent["client (this process)"] = after.client - before.client
    spent["idle"] = after.idle - before.idle
    capacity = (os.cpu_count() or 1) * (after.wall - before.wall)
    spent["other"] = capacity - sum(spent.values())
    spent["capacity"] = capacity
    return spent


# --- load -------------------------------------------------------------------------------------


@dataclass(slots=True)
class Sample:
    """One request: perf_counter times, the delivery id and what came back."""

    started: float
    finished: float
    delivery: str
    status: int  # 0: no answer
    error: str | None = None
    event_id: int | None = None


@dataclass
class Side:
    """One endpoint under load: its requests, the measured window and the CPU spent in it."""

    label: str
    samples: list[Sample]
    window: tuple[float, float]
    cpu: dict[str, float]
    first_errors: dict[str, str]
    notes: list[str] = field(default_factory=list)

    @property
    def accepted(self) -> list[Sample]:
        return [s for s in self.samples if s.status == 202]

    @property
    def done(self) -> int:
        """Accepted deliveries answered within the window."""
        start, end = self.window
        return sum(1 for s in self.accepted if start <= s.finished <= end)

    @property
    def rate(self) -> float:
        return self.done / (self.window[1] - self.window[0])

    @property
    def latencies(self) -> list[float]:
        return [s.finished - s.started for s in self.accepted if s.started >= self.window[0]]

    @property
    def p50(self) -> float:
        return percentile(self.latencies, 50)

    @property
    def p99(self) -> float:
        return percentile(self.latencies, 99)

    @property
    def errors(self) -> collections.Counter[str]:
        return collections.Counter(s.error for s in self.samples if s.error is not None)


async def deliver(
    connection: rawhttp.Connection, deliveries: Deliveries, seq: int, first_errors: dict[str, str]
) -> Sample:
    """Send the seq-th delivery and time it."""
    delivery, headers, body = deliveries.make(seq)
    started = time.perf_counter()
    try:
        response = await connection.post(PATH, headers, body)
    except rawhttp.HttpError as exc:
        kind = str(exc).partition(":")[0]
        first_errors.setdefault(kind, str(exc))
        return Sample(started, time.perf_counter(), delivery, 0, kind)
    finished = time.perf_counter()
    if response.status != 202:
        kind = f"HTTP {response.status}"
        first_errors.setdefault(kind, response.body[:300].decode(errors="replace"))
        return Sample(started, finished, delivery, response.status, kind)
    return Sample(started, finished, delivery, 202, None, json.loads(response.body).get("event_id"))


async def generate(
    label: str, url: str, deliveries: Deliveries, meter: CpuMeter, args: argparse.Namespace
) -> Side:
    """`args.connections` workers sending deliveries back to back until the deadline."""
    samples: list[Sample] = []
    first_errors: dict[str, str] = {}
    seqs = itertools.count()
    connections = [rawhttp.Connection(url, REQUEST_TIMEOUT) for _ in range(args.connections)]
    window_start = time.perf_counter() + args.warmup
    deadline = window_start + args.seconds

    async def send(connection: rawhttp.Connection) -> None:
        for seq in seqs:  # shared: stops at --max-requests in all, or at the deadline
            if seq >= args.max_requests or time.perf_counter() >= deadline:
                return
            samples.append(await deliver(connection, deliveries, seq, first_errors))

    async def measure() -> tuple[CpuSample, CpuSample]:
        await asyncio.sleep(max(0.0, window_start - time.perf_counter()))
        before = await asyncio.to_thread(meter.take)
        await asyncio.sleep(max(0.0, deadline - time.perf_counter()))
        return before, await asyncio.to_thread(meter.take)

    try:
        async with asyncio.TaskGroup() as group:
            cpu = group.create_task(measure())
            for connection in connections:
                group.create_task(send(connection))
    finally:
        for connection in connections:
            connection.close()
    end = deadline
    if len(samples) >= args.max_requests:  # the cap ended the load before the deadline
        end = min(deadline, max(s.finished for s in samples))
    side = Side(label, samples, (window_start, end), cpu_spent(*cpu.result()), first_errors)
    if end < deadline:
        side.notes.append(f"--max-requests reached {deadline - end:.1f} s before the deadline")
    if not side.accepted:
        detail = "; ".join(f"{k}: {v}" for k, v in first_errors.items()) or "no request was sent"
        raise BenchError(f"{label}: no delivery was accepted ({detail})")
    return side


def load(
    label: str, url: str, deliveries: Deliveries, meter: CpuMeter, args: argparse.Namespace
) -> Side:
    """Run `generate` on uvloop, as the servers run (a lighter load generator leaves them more
    of the CPU)."""
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(generate(label, url, deliveries, meter, args))
