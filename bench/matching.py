"""Event matching benchmark: which rules can match one event, among N rules, mostly cron.

In a scratch PostgreSQL database `ade_matchbench_<pid>` (dropped at the end), `--rules` rules
(default 10,000) are synced from files, one in a hundred with a webhook trigger (on one of
seven hooks), the rest cron rules as `bench/rules_sync.py` writes them. Then, in this process,
the lookup of one webhook event to hook `hook-0` is timed three ways:

* baseline, every rule validated: every rule row read and its document validated (once per
  content hash), as event matching did before `db/rule_triggers.py`;
* the index by type: `rule_triggers.rules_with_trigger` without keys (every webhook rule, as
  the poller and the run.finished sweep read their kinds);
* the index by type and key: the rules indexed under the event's hook or the wildcard, as
  `local_events.emit` reads an event's candidates.

Each is timed cold (nothing parsed yet and a new connection, as a new worker process) and warm
(p50 / p99 of `--events` lookups), and the ratios to the baseline printed. The indexed event
lookup is also timed in a fresh process (`--first-lookup`: its imports done, then the engine
made and the first lookup timed). The ingress
dispatcher bounds an event's matching at 10 s.

    .venv/bin/python bench/matching.py [--rules 10000] [--events 30]
"""

from __future__ import annotations

import sys as _sys
from pathlib import Path as _Path

if __package__ in (None, ""):  # run as a script: make `bench.*` importable
    _sys.path.insert(0, str(_Path(__file__).resolve().parent.parent))

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from sqlalchemy import Engine

from ade_tasks.db import rule_triggers
from ade_tasks.db import rules as rules_db
from ade_tasks.db.engine import SessionFactory, create_db_engine, create_session_factory
from ade_tasks.db.migrate import upgrade
from ade_tasks.rule_files.sync import sync_rules_dir
from ade_tasks.triggers.registry import event_keys
from bench.common import BenchError, percentile, require_loopback, scratch_database
from bench.rules_sync import DEFAULT_ADMIN_URL, rule_yaml

WEBHOOK_EVERY = 100
BASELINE_EVENTS = 5


def webhook_rule(index: int) -> str:
    return (
        f"id: hook-{index:06d}\ntriggers: [{{type: webhook, hook: hook-{index % 7}}}]\n"
        "execution: {kind: built-in, actions: [{type: run-command, command: 'true'}]}\n"
    )


def write_rules(directory: Path, count: int) -> None:
    for index in range(count):
        text = webhook_rule(index) if index % WEBHOOK_EVERY == 0 else rule_yaml(index)
        (directory / f"rule-{index:06d}.yaml").write_text(text)


def every_rule_validated(sessions: SessionFactory) -> int:
    """The baseline: what matching read before (every row, every document validated)."""
    with sessions() as session:
        rules = [rules_db.load_rule(row) for row in rules_db.list_rules(session) if row.enabled]
    return sum(1 for rule in rules if any(t.type == "webhook" for t in rule.triggers))


def by_trigger_type(sessions: SessionFactory) -> int:
    with sessions() as session:
        return len(rule_triggers.rules_with_trigger(session, "webhook"))


def by_type_and_key(sessions: SessionFactory) -> int:
    keys = event_keys("webhook:hook-0", ["webhook"], {})
    with sessions() as session:
        return len(rule_triggers.rules_with_trigger(session, "webhook", keys=keys))


def time_lookup(lookup: Callable[[SessionFactory], int], engine: Engine, events: int,
                expected: int) -> tuple[float, list[float]]:  # fmt: skip
    rules_db._PARSED.clear()
    engine.dispose()  # the first lookup opens its connection, as a new worker's does
    sessions = create_session_factory(engine)
    started = time.perf_counter()
    if (found := lookup(sessions)) != expected:
        raise BenchError(f"{lookup.__name__} found {found} webhook rules, not {expected}")
    cold = time.perf_counter() - started
    warm = []
    for _ in range(events):
        started = time.perf_counter()
        lookup(sessions)
        warm.append(time.perf_counter() - started)
    return cold, warm


def first_lookup(url: str) -> float:
    """The fresh process's side: the engine made and one event's lookup, timed (seconds)."""
    started = time.perf_counter()
    engine = create_db_engine(url)
    by_type_and_key(create_session_factory(engine))
    elapsed = time.perf_counter() - started
    engine.dispose()
    return elapsed


def in_fresh_process(url: str) -> float:
    child = subprocess.run(
        [sys.executable, __file__, "--first-lookup", url],
        capture_output=True,
        text=True,
        check=False,
    )
    if child.returncode != 0:
        raise BenchError(f"the fresh process failed: {child.stderr.strip()[-500:]}")
    return float(child.stdout.strip())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rules", type=int, default=10_000)
    parser.add_argument("--events", type=int, default=30)
    parser.add_argument("--first-lookup", metavar="URL", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.first_lookup:
        print(first_lookup(args.first_lookup))
        return 0
    if not 100 <= args.rules <= 200_000 or not 1 <= args.events <= 1000:
        parser.error("--rules must be 100..200000 and --events 1..1000")
    admin_url = os.environ.get("ADE_BENCH_PG_ADMIN", DEFAULT_ADMIN_URL)
    require_loopback(admin_url, "ADE_BENCH_PG_ADMIN")
    expected = len(range(0, args.rules, WEBHOOK_EVERY))
    on_hook_0 = len(range(0, args.rules, WEBHOOK_EVERY * 7))
    try:
        with (
            scratch_database(admin_url, "ade_matchbench") as url,
            tempfile.TemporaryDirectory() as d,
        ):
            engine = create_db_engine(url)
            upgrade(engine)
            sessions = create_session_factory(engine)
            write_rules(Path(d), args.rules)
            loaded, _ = sync_rules_dir(sessions, Path(d))
            if loaded.problems:
                raise BenchError(f"the bench's rules did not load: {loaded.problems[:3]}")
            print(
                f"{args.rules:,} rules ({expected:,} with a webhook trigger, {on_hook_0:,} on "
                "hook-0), one webhook event to hook-0"
            )
            results = {
                # a few lookups: each reads every document (about 3 s at 30,000 rules)
                "every rule validated (baseline)": time_lookup(
                    every_rule_validated, engine, min(args.events, BASELINE_EVENTS), expected
                ),
                "index by type": time_lookup(by_trigger_type, engine, args.events, expected),
                "index by type and key": time_lookup(
                    by_type_and_key, engine, args.events, on_hook_0
                ),
            }
            fresh = [in_fresh_process(url) for _ in range(3)]
            engine.dispose()
    except BenchError as exc:
        print(f"bench/matching.py: {exc}", file=sys.stderr)
        return 1
    base_cold, base_warm = results["every rule validated (baseline)"]
    for name, (cold, warm) in results.items():
        p50, p99 = percentile(warm, 50), percentile(warm, 99)
        print(
            f"  {name:32} cold {cold * 1000:8.1f} ms   warm p50 {p50 * 1000:7.1f} ms  "
            f"p99 {p99 * 1000:7.1f} ms   (cold x{base_cold / cold:.1f}, "
            f"warm x{percentile(base_warm, 50) / p50:.1f} faster than the baseline)"
        )
    shown = ", ".join(f"{t * 1000:.1f}" for t in fresh)
    print(f"  index by type and key, first lookup of a fresh process: {shown} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
