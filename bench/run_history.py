"""A long run history for the benchmarks that read it (`bench/metrics.py`, `bench/history.py`):
runs filled with `generate_series` in a scratch PostgreSQL database, steps and events for some of
them, and the real app served over it by uvicorn on 127.0.0.1.

The mix is what a shared cluster's history looks like, spread over the last 30 days: rule
`rule-<n % rules>`; 85 % succeeded, 10 % failed (with 100 rules, a third of the rules fail a
third of their runs, as flaky rules do, and the others never), a few cancelled, timed out and
skipped; each rule has one trigger type (schedule, a GitHub pull request, a webhook or a commit)
and one run in ten is manual; every seventh rule is an agent rule (queue `ade.agent`) whose runs
sit in the review queue (`verification-required` is rare: one run of 500). No run has trigger
type `lane.merged`, so that filter is the worst case: nothing matches. The metrics bench fills
without the mix (`mixed=False`: scheduled, built-in, one run in ten failed), as it always did, so
its figures stay comparable: a scrape's cost grows with the number of (rule, status) series.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime

import httpx
import uvicorn
from sqlalchemy import text

from ade_api.http.app import create_app
from ade_tasks.db.engine import SessionFactory
from ade_tasks.settings import Settings
from bench.common import BenchError, percentile
from bench.servers import free_port

ADMIN_URL = os.environ.get(
    "ADE_BENCH_PG_ADMIN", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
CHUNK = 200_000
#: Over how long the filled runs were queued, ending now (30 days).
SPAN_S = 2_592_000.0

# `r` is the rule's number, `k` counts the rule's own runs (so the rule's runs vary by `k`).
INSERT_RUNS = """
INSERT INTO runs (id, rule_id, rule_version, trigger_type, trigger_summary, trigger,
                  idempotency_key, status, queue_status, billing_code, usage, queue, attempt,
                  buffered, send_count, queued_at, started_at, finished_at)
SELECT md5(:tag || n::text)::uuid::text, 'rule-' || r, 1,
       CASE WHEN NOT :mixed THEN 'schedule' WHEN k % 10 = 0 THEN 'manual'
            ELSE (ARRAY['schedule', 'schedule', 'github.pr_opened', 'webhook',
                        'git.commit'])[1 + r % 5] END,
       'bench', '{}', md5(:tag || n::text),
       CASE WHEN NOT :mixed THEN (CASE WHEN n % 10 = 0 THEN 'failed' ELSE 'succeeded' END)
            WHEN (n / 3) % 10 = 0 THEN 'failed' WHEN n % 97 = 1 THEN 'cancelled'
            WHEN n % 89 = 2 THEN 'timed_out' WHEN n % 83 = 3 THEN 'skipped'
            ELSE 'succeeded' END,
       CASE WHEN NOT :mixed OR r % 7 <> 0 THEN NULL
            WHEN k % 500 = 1 THEN 'verification-required'
            ELSE (ARRAY['pending-review', 'actionable-findings', 'completed-clean',
                        'ignored', 'archived'])[1 + k % 5] END,
       'auto:rule-' || r, '{}',
       CASE WHEN :mixed AND r % 7 = 0 THEN 'ade.agent' ELSE 'ade.builtin' END,
       1, false, 1, f - interval '1 minute', f - (n % 600) * interval '1 second', f
FROM (SELECT n, n % CAST(:rules AS bigint) AS r, n / CAST(:rules AS bigint) AS k,
             :end - (n * :span / :total) * interval '1 second' AS f
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
# Every 20th run has two command steps; every 200th has 20 transcript lines.
INSERT_STEPS = """
INSERT INTO run_steps (run_id, "index", step_id, action_type, status, started_at, finished_at,
                       exit_code, output, result)
SELECT md5(:tag || n::text)::uuid::text, i, 'step-' || i, 'run-command', 'succeeded',
       :end, :end, 0, repeat('a line of output ' || n || E'\\n', 20), '{}'
FROM generate_series(CAST(:first AS bigint), CAST(:last AS bigint)) AS n,
     generate_series(0, 1) AS i
WHERE n % 20 = 0
"""
INSERT_EVENTS = """
INSERT INTO run_events (run_id, at, kind, step_index, data)
SELECT md5(:tag || n::text)::uuid::text, :end, 'log.line', 0,
       json_build_object('line', 'event ' || e || ' of run ' || n)
FROM generate_series(CAST(:first AS bigint), CAST(:last AS bigint)) AS n,
     generate_series(1, 20) AS e
WHERE n % 200 = 0
"""


def run_id_of(tag: str, n: int) -> str:
    """The id `fill_runs` gave run `n` of `tag` (md5 of tag || n, as a UUID)."""
    return str(uuid.UUID(hashlib.md5(f"{tag}{n}".encode()).hexdigest()))


def fill_runs(
    sessions: SessionFactory,
    runs: int,
    rules: int,
    *,
    end: datetime,
    tag: str = "h",
    total: int | None = None,
    transcripts: bool = False,
    mixed: bool = True,
    span: float = SPAN_S,
) -> None:
    """Insert runs 1..`runs` of `tag` (run n queued n/`total` of `span` seconds, 30 days by
    default, before `end`; `total` defaults to `runs`), with steps and events when
    `transcripts`, in chunks of 200,000. Not `mixed`: the metrics bench's history, scheduled
    built-in runs, one in ten failed."""
    started = time.monotonic()
    statements = [INSERT_RUNS] + ([INSERT_STEPS, INSERT_EVENTS] if transcripts else [])
    for first in range(1, runs + 1, CHUNK):
        last = min(first + CHUNK - 1, runs)
        params = {"tag": tag, "rules": rules, "end": end, "total": total or runs,
                  "span": span, "first": first, "last": last, "mixed": mixed}  # fmt: skip
        with sessions.begin() as session:
            for statement in statements:
                session.execute(text(statement), params)
        if runs > CHUNK:
            took = time.monotonic() - started
            print(f"  inserted {last:,} / {runs:,} runs ({took:.0f} s)", flush=True)


def fill_history(sessions: SessionFactory, runs: int, rules: int, *, end: datetime,
                 transcripts: bool = False, mixed: bool = True,
                 span: float = SPAN_S) -> None:  # fmt: skip
    """`runs` finished runs, 100 queued ones, then ANALYZE (the planner's view of a long-lived
    table)."""
    fill_runs(sessions, runs, rules, end=end, transcripts=transcripts, mixed=mixed, span=span)
    with sessions.begin() as session:
        session.execute(text(INSERT_UNFINISHED))
    with sessions.begin() as session:
        session.execute(text("ANALYZE runs, run_steps, run_events"))


@contextmanager
def serving(settings: Settings, sessions: SessionFactory) -> Iterator[httpx.Client]:
    """The real app under uvicorn on a free loopback port, and a client of it."""
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
    """Seconds of `count` GETs of `path`, one after the other; a non-200 answer stops the bench."""
    seconds = []
    for _ in range(count):
        started = time.perf_counter()
        response = client.get(path)
        seconds.append(time.perf_counter() - started)
        if response.status_code != 200:
            raise BenchError(f"GET {path} answered {response.status_code}: {response.text[:300]}")
    return seconds


def line(label: str, seconds: list[float], baseline: float, width: int = 30) -> str:
    """p50, p99 and the p50's ratio to the baseline's p50, on one line."""
    p50, p99 = percentile(seconds, 50), percentile(seconds, 99)
    ratio = p50 / baseline
    return f"  {label:<{width}} p50 {p50 * 1000:8.1f} ms   p99 {p99 * 1000:8.1f} ms   {ratio:7.1f}x"
