"""Metrics scrape benchmark: `GET /metrics` over a long run history, against `GET /healthz`.

In a scratch PostgreSQL database `ade_metricsbench_<pid>` (dropped at the end), `--runs` finished
runs (default 1,000,000) of `--rules` rules (default 100) are inserted with `generate_series`
(`bench/run_history.py`, without its mix: one in ten failed, the rest succeeded), finished over
the last 30 days, plus 100 unfinished ones. The real app is served by uvicorn on 127.0.0.1 and
scraped `--scrapes` times (default 30) in two states:

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
import time

from ade_tasks.clock import utcnow
from ade_tasks.db import run_rollups
from ade_tasks.db.engine import create_db_engine, create_session_factory
from ade_tasks.db.migrate import upgrade
from ade_tasks.settings import Settings
from bench.common import BenchError, percentile, scratch_database
from bench.run_history import ADMIN_URL, fill_history, fill_runs, line, serving, timed


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
        fill_history(sessions, args.runs, args.rules, end=utcnow(), mixed=False)
        settings = Settings(database_url=url, metrics_public=True)
        with serving(settings, sessions) as client:
            timed(client, "/healthz", 5)
            healthz = timed(client, "/healthz", args.scrapes)
            before = timed(client, "/metrics", max(3, args.scrapes // 5))
            started = time.monotonic()
            with sessions.begin() as session:
                added = run_rollups.advance(session)
            advance_s = time.monotonic() - started
            fill_runs(sessions, 100, args.rules, end=utcnow(), tag="t", total=1_000_000_000,
                      mixed=False)  # fmt: skip
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
