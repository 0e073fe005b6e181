"""Run history benchmark: `GET /api/v1/runs?limit=100` over a long history, against `GET /healthz`.

In a scratch PostgreSQL database `ade_historybench_<pid>` (dropped at the end unless `--keep`),
`--runs` finished runs (default 1,000,000) of `--rules` rules (default 100) are inserted with
`generate_series` (`bench/run_history.py`: the mix of rules, statuses, trigger types, queues and
review-queue states; every 20th run has two steps, every 200th 20 events), plus 100 queued ones,
then ANALYZE. The real app is served by uvicorn on 127.0.0.1; a viewer token reads:

* a page of 100 newest runs, unfiltered and with each filter the API offers: rule, status
  (common and rare), trigger type (common, and `lane.merged`, which no run has: the worst case),
  review-queue status (common and rare), a one-day since/until window, an id prefix, and rule +
  status together;
* page 51 (the cursor after following 50 `next_cursor`s), unfiltered and of one rule;
* a run's detail (its steps) and the first page of its events.

Each is timed `--requests` times (default 30) after one warm-up; the baseline is `GET /healthz`
on the same server in the same run. Printed: p50 / p99 of each and the ratio to the baseline.
Target (issue 18): every one < 20 ms at p50 over 10,000,000 runs.

    .venv/bin/python bench/history.py [--runs 1000000] [--rules 100] [--requests 30] [--keep]
    .venv/bin/python bench/history.py --reuse ade_historybench_<pid> --runs N   # after a change
"""

from __future__ import annotations

import sys as _sys
from pathlib import Path as _Path

if __package__ in (None, ""):  # run as a script: make `bench.*` importable
    _sys.path.insert(0, str(_Path(__file__).resolve().parent.parent))

import argparse
import time
from contextlib import nullcontext
from datetime import timedelta
from urllib.parse import urlencode

import httpx
from sqlalchemy import make_url, text

from ade_tasks.access.roles import Role
from ade_tasks.clock import utcnow
from ade_tasks.db import tokens as tokens_db
from ade_tasks.db.engine import create_db_engine, create_session_factory
from ade_tasks.db.migrate import upgrade
from ade_tasks.settings import Settings
from bench.common import BenchError, percentile, scratch_database
from bench.run_history import ADMIN_URL, fill_history, line, run_id_of, serving, timed

TARGET_S = 0.020
PAGE = 100
#: How many `next_cursor`s are followed to reach page 51.
PAGES_FOLLOWED = 50


def filters(runs: int) -> dict[str, dict[str, str]]:
    """The first pages to time: label -> query parameters (besides limit)."""
    end = utcnow()
    day = {"since": (end - timedelta(days=15)).isoformat(),
           "until": (end - timedelta(days=14)).isoformat()}  # fmt: skip
    return {
        "unfiltered": {},
        "rule=rule-7": {"rule": "rule-7"},
        "status=failed": {"status": "failed"},
        "status=queued (100 runs)": {"status": "queued"},
        "trigger_type=git.commit": {"trigger_type": "git.commit"},
        "trigger_type=lane.merged (none)": {"trigger_type": "lane.merged"},
        "queue_status=pending-review": {"queue_status": "pending-review"},
        "queue_status=verification-req.": {"queue_status": "verification-required"},
        "since/until (one day)": day,
        "id_prefix (8 chars)": {"id_prefix": run_id_of("h", runs // 2)[:8]},
        # rule-3 never fails (the fill's statuses cycle with the rule): a combination that
        # matches nothing, the worst case of two filters together.
        "rule=rule-3 + status=failed": {"rule": "rule-3", "status": "failed"},
    }


def cursor_of_page(client: httpx.Client, params: dict[str, str], page: int) -> str:
    """The cursor that opens page `page` (1-based), found by following `next_cursor`s."""
    cursor = ""
    for number in range(1, page):
        query = {**params, "limit": str(PAGE), **({"cursor": cursor} if cursor else {})}
        answer = client.get("/api/v1/runs", params=query)
        if answer.status_code != 200 or not answer.json()["next_cursor"]:
            raise BenchError(f"page {number} of {params or 'all runs'} has no next cursor")
        cursor = answer.json()["next_cursor"]
    return cursor


def runs_path(params: dict[str, str]) -> str:
    return "/api/v1/runs?" + urlencode({**params, "limit": str(PAGE)})


def measure(client: httpx.Client, runs: int, count: int) -> dict[str, list[float]]:
    """label -> seconds of each request, healthz first."""
    timed(client, "/healthz", 5)
    found: dict[str, list[float]] = {"GET /healthz (baseline)": timed(client, "/healthz", count)}
    for label, params in filters(runs).items():
        timed(client, runs_path(params), 1)
        found[label] = timed(client, runs_path(params), count)
    deep = {"page 51, unfiltered": {}, "page 51, rule=rule-7": {"rule": "rule-7"}}
    for label, params in deep.items():
        path = runs_path({**params, "cursor": cursor_of_page(client, params, PAGES_FOLLOWED + 1)})
        timed(client, path, 1)
        found[label] = timed(client, path, count)
    detailed = run_id_of("h", (runs // 2) - (runs // 2) % 200)  # has steps and events
    for label, path in (
        ("run detail (2 steps)", f"/api/v1/runs/{detailed}"),
        ("its events, first 100", f"/api/v1/runs/{detailed}/events?limit=100"),
    ):
        timed(client, path, 1)
        found[label] = timed(client, path, count)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1_000_000)
    parser.add_argument("--rules", type=int, default=100)
    parser.add_argument("--requests", type=int, default=30)
    parser.add_argument("--keep", action="store_true", help="leave the database for EXPLAIN")
    parser.add_argument(
        "--reuse", metavar="DATABASE",
        help="measure a database a --keep run left (upgraded first: the after of an index)",
    )  # fmt: skip
    args = parser.parse_args()
    if args.runs // max(args.rules, 8) < PAGE * (PAGES_FOLLOWED + 1):
        raise BenchError(
            f"--runs {args.runs:,} over {args.rules} rules is too few for page 51 of rule-7's runs"
        )
    database = (
        nullcontext(make_url(ADMIN_URL).set(database=args.reuse).render_as_string(False))
        if args.reuse
        else scratch_database(ADMIN_URL, "ade_historybench", keep=args.keep)
    )
    with database as url:
        engine = create_db_engine(url)
        started = time.monotonic()
        upgrade(engine)
        sessions = create_session_factory(engine)
        if args.reuse:
            print(f"upgraded {args.reuse} in {time.monotonic() - started:.1f} s", flush=True)
            with sessions.begin() as session:
                session.execute(text("ANALYZE runs"))
        else:
            print(f"filling {args.runs:,} runs of {args.rules:,} rules", flush=True)
            fill_history(sessions, args.runs, args.rules, end=utcnow(), transcripts=True)
        with sessions.begin() as session:
            _, token = tokens_db.create_token(session, "bench", Role.VIEWER, "bench/history.py")
        with serving(Settings(database_url=url), sessions) as client:
            client.headers["Authorization"] = f"Bearer {token}"
            found = measure(client, args.runs, args.requests)
        engine.dispose()
    base = percentile(found["GET /healthz (baseline)"], 50)
    print(f"\n{args.runs:,} runs, {args.rules:,} rules, limit={PAGE} (ratios: p50 / healthz p50)")
    for label, seconds in found.items():
        verdict = "" if label.startswith("GET /healthz") else (
            "  ok" if percentile(seconds, 50) < TARGET_S else "  MISS (>= 20 ms)")  # fmt: skip
        print(line(label, seconds, base, width=34) + verdict)


if __name__ == "__main__":
    try:
        main()
    except BenchError as exc:
        raise SystemExit(f"bench/history.py: {exc}") from exc
