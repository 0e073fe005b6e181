"""Webhook benchmark: signed GitHub deliveries into ADE's API against a minimal endpoint that
only verifies the signature and pushes the body to Redis, both under the same concurrent load.

In one run, one side after the other, each served by `--processes` uvicorn processes the way
`ade-tasks api --workers N` serves them (`ade_api.cli.serve`: one SO_REUSEPORT socket per process;
default 2, one per core here; access log off on both sides):

(a) minimal: a FastAPI route that checks X-Hub-Signature-256 (HMAC-SHA256 of the raw body),
    LPUSHes the body to a Redis list and answers 202, served like the API
    (`bench/webhooks.py --serve-minimal --port P --processes N`).
(b) ADE: `ade-tasks api --no-sync-rules --workers N` on a scratch PostgreSQL database and Redis;
    `POST /api/v1/webhooks/github` verifies, normalizes and stores the delivery
    (`ingress_events`), answers, and publishes a message for the ingress workers. No worker
    runs.

Load: ~5 KB `pull_request.opened` deliveries made from the test fixture (URL fields and the
head/base copies of the repository dropped, `pull_request.body` padded), each with its own
X-GitHub-Delivery and a counter in the body (so neither dedup refuses it), signed. This process
keeps `--connections` keep-alive connections (`bench.rawhttp`, on uvloop: about 0.1 ms of CPU
per request where httpx took 1 ms, CPU the servers would otherwise lose) sending back to back
for `--warmup` + `--seconds` seconds (at most `--max-requests`); the warm-up is left out of the
figures. Per side: accepted (202)
deliveries/s, p50/p99 latency of the accepted ones, errors, CPU per delivery by process. The loop
is closed: at saturation the mean latency is connections / throughput (Little's law).

Afterwards each accepted delivery must be stored exactly once: ADE's as one `ingress_events` row
with the event id its answer gave, carried by exactly one of the ingress messages waiting in the
broker (the API publishes what is still queued when it stops), the minimal side's in the Redis
list. ingress_events keeps the
newest 2,000 undispatched events (KEEP_UNDISPATCHED), and with no worker nothing is dispatched,
so a long run deletes its oldest deliveries as it goes; a trigger the bench adds to the scratch
database logs those deletions (`bench_pruned_events`) and they are reported, not lost.

Targets: ADE >= 0.3x the minimal endpoint's deliveries/s, ADE p99 < 100 ms, exactly once.

The benchmark creates a scratch database `ade_hookbench_<pid>` (dropped at the end), uses Redis
database 10 (flushed before and after) and only talks to loopback services. From the repository
root (about 45 s with the defaults):

    .venv/bin/python bench/webhooks.py [--seconds 15] [--connections 32]

It exits non-zero only when something breaks (a service is down, a server does not start or
dies, an accepted delivery is missing or stored twice); a missed target is reported as MISS.
"""

from __future__ import annotations

import sys as _sys
from pathlib import Path as _Path

if __package__ in (None, ""):  # run as a script: make `bench.*` importable
    _sys.path.insert(0, str(_Path(__file__).resolve().parent.parent))

import argparse
import asyncio
import base64
import collections
import contextlib
import hashlib
import hmac
import itertools
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import redis
import redis.asyncio
import uvloop
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from sqlalchemy import Engine, text

from ade_api.cli.serve import serve
from ade_tasks.db.engine import create_db_engine
from ade_tasks.db.ingress import KEEP_UNDISPATCHED
from bench import rawhttp
from bench.common import (
    BenchError,
    exit_on_sigterm,
    machine_idle_seconds,
    parent_pid,
    percentile,
    process_cpu_seconds,
    process_tree_cpu_seconds,
    require_loopback,
    require_own_redis_db,
    scratch_database,
    tail,
)

REPO_ROOT = Path(__file__).resolve().parent.parent
FIXTURE = REPO_ROOT / "tests" / "fixtures" / "github" / "pull_request" / "opened.payload.json"
ADE_TASKS = Path(sys.executable).parent / "ade-tasks"
DEFAULT_ADMIN_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/10"
OWNER = "bench/webhooks.py"

PATH = "/api/v1/webhooks/github"
MINIMAL_KEY = "bench:webhooks:minimal"
INGRESS_QUEUE = "ade.ingress"  # where the API queues ingress messages (ade_workers.celery.sender)
SECRET_ENV = "BENCH_WEBHOOKS_SECRET"
REDIS_ENV = "BENCH_WEBHOOKS_REDIS_URL"

BODY_BYTES = 5 * 1024
FILLER = b"Lorem ipsum dolor sit amet, consectetur adipiscing elit. "
REQUEST_TIMEOUT = 10.0
START_SECONDS = 30.0
STOP_SECONDS = 10.0
MIGRATE_SECONDS = 120.0

TARGET_THROUGHPUT_RATIO = 0.3
TARGET_P99_SECONDS = 0.100
BUSY_WARNING = 0.10  # share of the machine's CPU used by processes outside the benchmark

# Deletions from ingress_events (its retention) land here, so pruned deliveries still count.
PRUNE_LOG_DDL = (
    "CREATE TABLE bench_pruned_events (id bigint, source text, delivery_id text)",
    "CREATE FUNCTION bench_log_pruned() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
    " INSERT INTO bench_pruned_events SELECT id, source, delivery_id FROM dropped;"
    " RETURN NULL; END $$",
    "CREATE TRIGGER bench_log_pruned AFTER DELETE ON ingress_events"
    " REFERENCING OLD TABLE AS dropped FOR EACH STATEMENT EXECUTE FUNCTION bench_log_pruned()",
)


# --- the minimal endpoint, served by `bench/webhooks.py --serve-minimal PORT` -----------------


def minimal_app(secret: bytes, redis_url: str) -> FastAPI:
    """Verify X-Hub-Signature-256 over the raw body, LPUSH the body, answer 202."""
    store = redis.asyncio.Redis.from_url(redis_url)
    app = FastAPI()

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.post(PATH, status_code=202)
    async def github(request: Request) -> JSONResponse:
        body = await request.body()
        expected = "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()
        if not hmac.compare_digest(expected, request.headers.get("x-hub-signature-256", "")):
            return JSONResponse({"detail": "bad signature"}, status_code=401)
        await store.lpush(MINIMAL_KEY, body)
        return JSONResponse({"queued": True}, status_code=202)

    return app


def minimal_from_environment() -> FastAPI:
    """The minimal endpoint as each of its uvicorn worker processes builds it."""
    return minimal_app(os.environ[SECRET_ENV].encode(), os.environ[REDIS_ENV])


def serve_minimal(port: int, processes: int) -> None:
    """Serve the minimal endpoint the way `ade-tasks api --workers N` serves ADE's: the same
    uvicorn processes (`ade_api.cli.serve`: one SO_REUSEPORT socket each) and access log (off)."""
    serve(
        "bench.webhooks:minimal_from_environment",
        workers=processes,
        host="127.0.0.1",
        port=port,
        log_level="info",
        access_log=False,
    )


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


# --- servers ----------------------------------------------------------------------------------


@dataclass
class Server:
    """A child process serving HTTP on a loopback port, in its own session, logging to a file."""

    name: str
    proc: subprocess.Popen[bytes]
    url: str
    log: Path

    def check_alive(self) -> None:
        if self.proc.poll() is not None:
            raise BenchError(
                f"{self.name} exited with status {self.proc.returncode}; its log ends with:\n"
                + tail(self.log)
            )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def base_env() -> dict[str, str]:
    """Our environment without any ADE_* or BENCH_* variable, with the repository importable."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ADE_", "BENCH_"))}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    return env


def _wait_up(server: Server) -> None:
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        server.check_alive()
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(f"{server.url}/healthz", timeout=1.0, trust_env=False).status_code == 200:
                return
        time.sleep(0.1)
    raise BenchError(
        f"{server.name} did not answer GET /healthz within {START_SECONDS:g} s:\n"
        + tail(server.log)
    )


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=STOP_SECONDS)
    # Started in its own session, so its pgid is its pid: this reaches only what it forked.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)


@contextlib.contextmanager
def serving(name: str, argv: Sequence[str], env: dict[str, str], work: Path) -> Iterator[Server]:
    """A server started with `argv` + `--port P`, answering GET /healthz; stopped afterwards."""
    port = free_port()
    log_path = work / f"{name}.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [*argv, "--port", str(port)],
            cwd=work,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    server = Server(name, proc, f"http://127.0.0.1:{port}", log_path)
    try:
        _wait_up(server)
        yield server
        server.check_alive()
    finally:
        _stop(proc)


# --- the two sides ----------------------------------------------------------------------------


def bench_minimal(
    args: argparse.Namespace, store: redis.Redis, redis_pid: int, secret: str, work: Path
) -> Side:
    env = base_env() | {SECRET_ENV: secret, REDIS_ENV: args.redis_url}
    argv = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--serve-minimal",
        "--processes",
        str(args.processes),
    ]
    deliveries = Deliveries(secret.encode(), args.body_bytes)
    with serving("minimal", argv, env, work) as server:
        pid = server.proc.pid
        meter = CpuMeter({"server": (pid, True), "redis": (redis_pid, False)})
        side = load("minimal (HMAC + LPUSH)", server.url, deliveries, meter, args)
    pushed = int(store.llen(MINIMAL_KEY))
    if pushed < len(side.accepted):
        raise BenchError(f"minimal: {len(side.accepted)} accepted, only {pushed} in Redis")
    side.notes.append(f"stored: {pushed} bodies in the Redis list for {len(side.accepted)} 202s")
    return side


@dataclass
class StoredCheck:
    """What became of ADE's accepted deliveries in the database."""

    accepted: int
    in_table: int
    pruned: int
    missing: int
    duplicated: int
    wrong_id: int
    stored_unanswered: int  # stored although the client got no 202 (a timeout, say)
    handed_over: int = 0  # accepted events in exactly one ingress message

    @property
    def ok(self) -> bool:
        handed = self.handed_over == self.accepted
        return handed and not (self.missing or self.duplicated or self.wrong_id)


_STORED = text(
    "SELECT delivery_id, id FROM ingress_events"
    " WHERE source = 'github' AND delivery_id = ANY(CAST(:ids AS text[]))"
    " UNION ALL SELECT delivery_id, id FROM bench_pruned_events"
    " WHERE source = 'github' AND delivery_id = ANY(CAST(:ids AS text[]))"
)
_IN_TABLE = text(
    "SELECT count(*) FROM ingress_events"
    " WHERE source = 'github' AND delivery_id = ANY(CAST(:ids AS text[]))"
)
_SESSIONS = text("SELECT sessions FROM pg_stat_database WHERE datname = current_database()")


def check_stored(engine: Engine, samples: Sequence[Sample]) -> StoredCheck:
    """Each accepted delivery stored once, under the event id its answer gave."""
    answered = {s.delivery: s.event_id for s in samples if s.status == 202}
    sent = [s.delivery for s in samples]
    with engine.connect() as connection:
        rows = connection.execute(_STORED, {"ids": sent}).all()
        in_table = connection.execute(_IN_TABLE, {"ids": list(answered)}).scalar_one()
    ids: dict[str, list[int]] = collections.defaultdict(list)
    for delivery, event_id in rows:
        ids[delivery].append(int(event_id))
    return StoredCheck(
        accepted=len(answered),
        in_table=int(in_table),
        pruned=sum(1 for d in answered if ids.get(d)) - int(in_table),
        missing=sum(1 for d in answered if not ids.get(d)),
        duplicated=sum(1 for d in ids if len(ids[d]) > 1),
        wrong_id=sum(1 for d, e in answered.items() if len(ids.get(d, [])) == 1 and ids[d] != [e]),
        stored_unanswered=sum(1 for d in ids if d not in answered),
    )


def migrate(env: dict[str, str], work: Path) -> None:
    try:
        done = subprocess.run(
            [str(ADE_TASKS), "db", "upgrade"],
            cwd=work,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=MIGRATE_SECONDS,
        )
    except subprocess.TimeoutExpired as exc:
        raise BenchError(f"`ade-tasks db upgrade` took over {MIGRATE_SECONDS:g} s") from exc
    if done.returncode != 0:
        output = (done.stdout + done.stderr).decode(errors="replace")
        raise BenchError(f"`ade-tasks db upgrade` failed:\n{output[-2000:]}")


def queued_events(store: redis.Redis) -> tuple[int, collections.Counter[int]]:
    """The messages waiting in the ingress queue's Redis lists, and the event ids they carry
    (a kombu envelope around Celery's [args, kwargs, embed] body)."""
    messages, carried = 0, collections.Counter[int]()
    for key in store.scan_iter(match=f"{INGRESS_QUEUE}*"):
        if store.type(key) != b"list":
            continue
        for raw in store.lrange(key, 0, -1):
            envelope = json.loads(raw)
            body = envelope["body"]
            if envelope["properties"].get("body_encoding") == "base64":
                body = base64.b64decode(body)
            messages += 1
            carried.update(json.loads(body)[0])
    return messages, carried


def bench_ade(
    args: argparse.Namespace,
    store: redis.Redis,
    redis_pid: int,
    secret: str,
    database_url: str,
    work: Path,
) -> tuple[Side, StoredCheck]:
    env = base_env() | {
        "ADE_DATABASE_URL": database_url,
        "ADE_BROKER_URL": args.redis_url,
        "ADE_GITHUB__WEBHOOK_SECRET": secret,
        "ADE_DATA_DIR": str(work / "data"),
    }
    migrate(env, work)
    engine = create_db_engine(database_url)
    try:
        with engine.begin() as connection:
            for statement in PRUNE_LOG_DDL:
                connection.execute(text(statement))
            backend = connection.execute(text("SELECT pg_backend_pid()")).scalar_one()
            sessions = connection.execute(_SESSIONS).scalar_one()
        postmaster = parent_pid(backend)
        if postmaster is None:  # PostgreSQL runs elsewhere (a container, say)
            raise BenchError("PostgreSQL's processes are not visible in this machine's /proc")
        argv = [str(ADE_TASKS), "api", "--no-sync-rules", "--workers", str(args.processes)]
        deliveries = Deliveries(secret.encode(), args.body_bytes)
        with serving("ade-api", argv, env, work) as server:
            pid = server.proc.pid
            meter = CpuMeter(
                {
                    "server": (pid, True),
                    "postgres": (postmaster, True),
                    "redis": (redis_pid, False),
                }
            )
            side = load("ADE /api/v1/webhooks/github", server.url, deliveries, meter, args)
        stored = check_stored(engine, side.samples)
        with engine.connect() as connection:
            sessions = connection.execute(_SESSIONS).scalar_one() - sessions
    finally:
        engine.dispose()
    side.notes.append(f"PostgreSQL sessions opened in the scratch database: {sessions}")
    messages, carried = queued_events(store)
    stored.handed_over = sum(1 for s in side.accepted if carried[s.event_id or 0] == 1)
    side.notes.append(
        f"handed to the ingress workers: {stored.handed_over} of {len(side.accepted)} accepted"
        f" events, each in exactly one of {messages} messages waiting in {INGRESS_QUEUE}"
    )
    return side, stored


# --- setup, report, main ----------------------------------------------------------------------


def run(args: argparse.Namespace) -> tuple[Side, Side, StoredCheck]:
    require_loopback(args.admin_url, "--admin-url")
    require_loopback(args.redis_url, "--redis-url")
    require_own_redis_db(args.redis_url, OWNER)
    store = redis.Redis.from_url(args.redis_url)
    try:
        store.flushdb()
        redis_pid = int(store.info("server")["process_id"])
    except redis.RedisError as exc:
        raise BenchError(f"Redis at {args.redis_url} is not usable: {exc}") from exc
    secret = secrets.token_hex(32)
    try:
        with tempfile.TemporaryDirectory(prefix="ade-hookbench-") as tmp:
            work = Path(tmp)
            print(
                f"minimal endpoint ({args.warmup:g} s warm-up + {args.seconds:g} s) ...", flush=True
            )
            minimal = bench_minimal(args, store, redis_pid, secret, work)
            store.flushdb()  # its list holds every body sent
            print("ADE API (scratch database, migrate, serve) ...", flush=True)
            with scratch_database(args.admin_url, "ade_hookbench") as database_url:
                ade, stored = bench_ade(args, store, redis_pid, secret, database_url, work)
    finally:
        with contextlib.suppress(redis.RedisError):
            store.flushdb()
        store.close()
    return minimal, ade, stored


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


def _cpu_note(side: Side) -> str:
    per = 1000 / max(1, side.done)
    parts = [f"{k} {v * per:.2f}" for k, v in side.cpu.items() if k != "capacity"]
    return f"CPU ms per accepted delivery: {', '.join(parts)} (of {side.cpu['capacity'] * per:.2f})"


def report(args: argparse.Namespace, minimal: Side, ade: Side, stored: StoredCheck) -> None:
    print()
    print(
        f"{args.connections} connections, {args.body_bytes}-byte deliveries, {args.seconds:g} s"
        f" after {args.warmup:g} s of warm-up, {args.processes} server processes per side (uvicorn"
        " workers, access log off); the client runs in"
        f" this process and shares the {os.cpu_count()} cores with the servers"
    )
    print()
    print(f"{'':30} {'accepted/s':>10} {'p50':>9} {'p99':>9} {'accepted':>9}  errors")
    for side in (minimal, ade):
        errors = ", ".join(f"{k} x{n}" for k, n in side.errors.most_common()) or "0"
        print(
            f"{side.label:30} {side.rate:10.1f} {_ms(side.p50):>9} {_ms(side.p99):>9}"
            f" {len(side.accepted):9}  {errors}"
        )
        print(f"{'':4}{_cpu_note(side)}")
        busy = side.cpu["other"] / side.cpu["capacity"]
        if busy > BUSY_WARNING:
            print(f"{'':4}WARNING: other processes used {busy:.0%} of the CPU: figures skewed")
        for kind, detail in side.first_errors.items():
            print(f"{'':4}first {kind}: {detail}")
        for note in side.notes:
            print(f"{'':4}{note}")
    print(
        "CPU: server = the uvicorn processes; postgres, redis = the whole servers (their other"
        " databases too); client = this process; other = the rest of the machine."
    )
    print(
        f"Closed loop: at saturation mean latency = {args.connections} / throughput, so p99 <"
        f" {_ms(TARGET_P99_SECONDS)} needs well over {args.connections / TARGET_P99_SECONDS:.0f}"
        " deliveries/s."
    )
    print()
    ratio = ade.rate / minimal.rate
    verdict = "PASS" if ratio >= TARGET_THROUGHPUT_RATIO else "MISS"
    target = f"(target >= {TARGET_THROUGHPUT_RATIO})"
    print(f"ADE / minimal deliveries/s = {ratio:.2f}  {target}  {verdict}")
    print(f"ADE / minimal p99          = {ade.p99 / minimal.p99:.1f}")
    verdict = "PASS" if ade.p99 < TARGET_P99_SECONDS else "MISS"
    print(f"ADE p99 = {_ms(ade.p99)}  (target < {_ms(TARGET_P99_SECONDS)})  {verdict}")
    verdict = "PASS" if stored.ok else "FAIL"
    print(
        f"ADE stored and handed over exactly once: {stored.accepted - stored.missing} of"
        f" {stored.accepted} accepted stored, {stored.duplicated} duplicated, {stored.wrong_id}"
        f" under another event id; {stored.handed_over} in one ingress message each  {verdict}"
    )
    print(
        f"    {stored.in_table} still in ingress_events, {stored.pruned} deleted by its retention"
        f" (it keeps the newest {KEEP_UNDISPATCHED} undispatched and no worker ran);"
        f" {stored.stored_unanswered} stored without a 202 reaching the client"
    )


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--seconds", type=float, default=15.0, help="measured seconds per side")
    parser.add_argument("--connections", type=int, default=32, help="concurrent connections")
    parser.add_argument("--warmup", type=float, default=1.0, help="unmeasured seconds per side")
    parser.add_argument("--max-requests", type=int, default=200_000, help="cap per side")
    parser.add_argument("--body-bytes", type=int, default=BODY_BYTES, help="size of a delivery")
    parser.add_argument("--admin-url", default=DEFAULT_ADMIN_URL, help="PostgreSQL admin URL")
    parser.add_argument("--redis-url", default=DEFAULT_REDIS_URL, help="broker (flushed!)")
    parser.add_argument(
        "--processes", type=int, default=2, help="server processes per side (uvicorn workers)"
    )
    parser.add_argument("--serve-minimal", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve_minimal:
        if args.port is None:
            parser.error("--serve-minimal needs --port")
        return args
    if not 0 < args.seconds <= 600 or not 0 <= args.warmup <= 60:
        parser.error("need 0 < --seconds <= 600 and 0 <= --warmup <= 60")
    if not 1 <= args.connections <= 1000 or args.max_requests < 1:
        parser.error("need 1 <= --connections <= 1000 and --max-requests >= 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.serve_minimal:
        serve_minimal(args.port, args.processes)
        return 0
    signal.signal(signal.SIGTERM, exit_on_sigterm)
    try:
        minimal, ade, stored = run(args)
    except BenchError as exc:
        print(f"bench failed: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted; servers stopped, scratch database dropped", file=sys.stderr)
        return 130
    report(args, minimal, ade, stored)
    return 0 if stored.ok else 1


if __name__ == "__main__":
    sys.exit(main())
