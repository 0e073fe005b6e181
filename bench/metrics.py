"""Metrics scrape benchmark: `GET /metrics` over a long run history, against `GET /healthz`.

In a scratch PostgreSQL database `ade_metricsbench_<pid>` (dropped at the end), `--runs` finished
runs (default 1,000,000) of `--rules` rules (default 100) are inserted with `generate_series`,
finished over the last 30 days, plus 100 unfinished ones. The real app is served by uvicorn on
127.0.0.1 and scraped `--scrapes` times (default 30) in two states:

* before the rollup: the watermark is NULL, as right after the upgrade, so the scrape aggregates
  the whole runs table (what every scrape cost before `run_rollups`);
* after the rollup: one housekeeping advance (`run_rollups.advance`) summed the history; a scrape
  reads the rollup rows plus the runs past the watermark (100 fresh ones are added so the tail is
  not empty).

The baseline is `GET /healthz` on the same server, in the same run. Printed: p50 / p99 of each and
the ratios to the baseline. Target (issue 18): a scrape < 50 ms, independent of history size.

    .venv/bin/python bench/metrics.py [--runs 1000000] [--rules 1000] [--scrapes 30]
"""

from __future__ import annotations

import sys as _sys
from pathlib import Path as _Path

if __package__ in (None, ""):  # run as a script: make `bench.*` importable
    _sys.path.insert(0, str(_Path(__file__).resolve().parent.parent))

import argparse
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import uvicorn
from sqlalchemy import text

from ade_api.http.app import create_app
from ade_tasks.clock import utcnow
from ade_tasks.db import run_rollups
from ade_tasks.db.engine import SessionFactory, create_db_engine, create_session_factory
from ade_tasks.db.migrate import upgrade
from ade_tasks.settings import Settings
from bench.common import BenchError, percentile, scratch_database
from bench.webhooks import free_port

ADMIN_URL = os.environ.get(
    "ADE_BENCH_PG_ADMIN", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
CHUNK = 200_000

INSERT_RUNS = """
INSERT INTO runs (id, rule_id, rule_version, trigger_type, trigger_summary, trigger,
                  idempotency_key, status, billing_code, usage, queue, attempt, buffered,
                  send_count, queued_at, started_at, finished_at)
SELECT md5(:tag || n::text)::uuid::text, 'rule-' || (n % CAST(:rules AS bigint)), 1,
       'schedule', '', '{}',
       md5(:tag || n::text), CASE WHEN n % 10 = 0 THEN 'failed' ELSE 'succeeded' END,
       'auto:rule-' || (n % CAST(:rules AS bigint)), '{}', 'ade.builtin', 1, false, 1,
       f - interval '1 minute', f - (n % 600) * interval '1 second', f
FROM (SELECT n, :end - (n * 2592000.0 / :total) * interval '1 second' AS f
      FROM generate_series(CAST(:first AS bigint), CAST(:last AS bigint)) AS n) AS s
"""
INSERT_UNFINISHED = """
INSERT INTO runs (id, rule_id, rule_version, trigger_type, trigger_summary, trigger,
                  idempotency_key, status, billing_code, usage, queue, attempt, buffered,
                  send_count, queued_at)
SELECT md5('u' || n::text)::uuid::text, 'rule-' || (n % 10), 1, 'manual', '', '{}',
       md5('u' || n::text), 'queued', 'auto:rule-1', '{}', 'ade.builtin', 0, false, 1, now()
FROM generate_series(1, 100) AS n
"""


def fill(sessions: SessionFactory, runs: int, rules: int) -> None:
    end = utcnow()
    started = time.monotonic()
    for first in range(1, runs + 1, CHUNK):
        last = min(first + CHUNK - 1, runs)
        with sessions.begin() as session:
            session.execute(
                text(INSERT_RUNS),
                {
                    "tag": "h",
                    "rules": rules,
                    "end": end,
                    "total": runs,
                    "first": first,
                    "last": last,
                },
            )
        print(
            f"  inserted {last:,} / {runs:,} runs ({time.monotonic() - started:.0f} s)", flush=True
        )
    with sessions.begin() as session:
        session.execute(text(INSERT_UNFINISHED))
        session.execute(text("ANALYZE runs"))


@contextmanager
def serving(settings: Settings, sessions: SessionFactory) -> Iterator[httpx.Client]:
    app = create_app(settings, session_factory=sessions)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 15
    while not server.started:
        if time.monotonic() > deadline:
            raise BenchError("uvicorn did not start within 15 s")
        time.sleep(0.05)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as client:
            yield client
    finally:
        server.should_exit = True
        thread.join(10)


def timed(client: httpx.Client, path: str, count: int) -> list[float]:
    seconds = []
    for _ in range(count):
        started = time.perf_counter()
        response = client.get(path)
        seconds.append(time.perf_counter() - started)
        if response.status_code != 200:
            raise BenchError(f"GET {path} answered {response.status_code}: {response.text[:300]}")
    return seconds


def line(label: str, seconds: list[float], baseline: float) -> str:
    p50, p99 = percentile(seconds, 50), percentile(seconds, 99)
    ratio = p50 / baseline
    return f"  {label:<30} p50 {p50 * 1000:8.1f} ms   p99 {p99 * 1000:8.1f} ms   {ratio:7.1f}x"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1_000_000)
    parser.add_argument("--rules", type=int, default=100)
    parser.add_argument("--scrapes", type=int, default=30)
    args = parser.parse_args()
    with scratch_database(ADMIN_URL, "ade_metricsbench") as url:
        engine = create_db_engine(url)
        upgrade(engine)
        sessions = create_session_factory(engine)
        print(f"filling {args.runs:,} runs of {args.rules:,} rules", flush=True)
        fill(sessions, args.runs, args.rules)
        settings = Settings(database_url=url, metrics_public=True)
        with serving(settings, sessions) as client:
            timed(client, "/healthz", 5)
            healthz = timed(client, "/healthz", args.scrapes)
            before = timed(client, "/metrics", max(3, args.scrapes // 5))
            started = time.monotonic()
            with sessions.begin() as session:
                added = run_rollups.advance(session)
            advance_s = time.monotonic() - started
            with sessions.begin() as session:
                session.execute(
                    text(INSERT_RUNS),
                    {
                        "tag": "t",
                        "rules": args.rules,
                        "end": utcnow(),
                        "total": 1_000_000_000,
                        "first": 1,
                        "last": 100,
                    },
                )
            after = timed(client, "/metrics", args.scrapes)
        engine.dispose()
    base = percentile(healthz, 50)
    print(f"\n{args.runs:,} finished runs, {args.rules:,} rules (ratios: p50 / GET /healthz p50)")
    print(line("GET /healthz (baseline)", healthz, base))
    print(line("GET /metrics, whole table", before, base))
    print(line("GET /metrics, rollup + tail", after, base))
    print(f"  first rollup advance: {added:,} runs in {advance_s:.1f} s (once, after the upgrade)")


if __name__ == "__main__":
    try:
        main()
    except BenchError as exc:
        raise SystemExit(f"bench/metrics.py: {exc}") from exc
