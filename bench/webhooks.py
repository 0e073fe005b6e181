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

The parts: `bench.webhooks_minimal` (the baseline endpoint), `bench.webhooks_load` (the
deliveries, the load and the CPU it costs), `bench.webhooks_stored` (the exactly-once check),
`bench.servers` (the child servers); this module runs the two sides and reports.
"""

from __future__ import annotations

import sys as _sys
from pathlib import Path as _Path

if __package__ in (None, ""):  # run as a script: make `bench.*` importable
    _sys.path.insert(0, str(_Path(__file__).resolve().parent.parent))

import argparse
import contextlib
import os
import secrets
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import redis
from sqlalchemy import text

from ade_tasks.db.engine import create_db_engine
from ade_tasks.db.ingress import KEEP_UNDISPATCHED
from bench.common import (
    BenchError,
    exit_on_sigterm,
    parent_pid,
    require_loopback,
    require_own_redis_db,
    scratch_database,
)
from bench.servers import base_env, serving
from bench.webhooks_load import CpuMeter, Deliveries, Side, load
from bench.webhooks_minimal import MINIMAL_KEY, REDIS_ENV, SECRET_ENV, serve_minimal
from bench.webhooks_stored import INGRESS_QUEUE, StoredCheck, check_stored, queued_events

ADE_TASKS = Path(sys.executable).parent / "ade-tasks"
DEFAULT_ADMIN_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/10"
OWNER = "bench/webhooks.py"

BODY_BYTES = 5 * 1024
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


_SESSIONS = text("SELECT sessions FROM pg_stat_database WHERE datname = current_database()")


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
