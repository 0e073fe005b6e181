"""Rule sync benchmark: `rules sync` of N rule files into PostgreSQL, first sync and re-sync.

For each N in `--rules` (default 10,000 and 100,000), in a scratch PostgreSQL database
`ade_syncbench_<pid>` (dropped at the end) and a temporary rules directory, one rule per file
(`bench-000001.yaml`, ...: a schedule trigger and one `run-command` step, as a team writes them):

* first sync: every rule added (one `rules` row and one `rule_versions` row each);
* unchanged re-sync: the same files again, nothing to write;
* edited re-sync: one file in a hundred changed (its command), so 1 % of the rules get a new
  version.

Each phase is timed around `sync_rules_dir` (files read, parsed, validated, upserted, committed)
and its report checked (added / updated / unchanged counts). With `--baseline PATH` (a checkout of
the code before a change, e.g. `git worktree add /tmp/base HEAD~1`) the same phases run first in a
subprocess importing `ade_tasks` from PATH, against its own scratch database, and the ratios
baseline / this code are printed. `--profile` prints the top cProfile entries of the first sync.

Target (issue 18): 100,000 rules synced in under 30 s. Run it from the repository root:

    .venv/bin/python bench/rules_sync.py [--rules 10000 100000] [--baseline /tmp/base] [--profile]

It exits non-zero when something breaks (a service is down, a report does not match).
"""

from __future__ import annotations

import sys as _sys
from pathlib import Path as _Path

if __package__ in (None, ""):  # run as a script: make `bench.*` importable
    _sys.path.insert(0, str(_Path(__file__).resolve().parent.parent))

import argparse
import cProfile
import json
import os
import pstats
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from ade_tasks.db.engine import create_db_engine, create_session_factory
from ade_tasks.db.migrate import upgrade
from ade_tasks.rule_files.sync import sync_rules_dir
from bench.common import BenchError, exit_on_sigterm, require_loopback, scratch_database

DEFAULT_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
TARGET_SECONDS = 30.0
TARGET_RULES = 100_000
MAX_RULES = 200_000
EDIT_EVERY = 100  # the edited re-sync changes one file in this many
PHASES = ("first", "unchanged", "edited")


def rule_yaml(index: int, command: str = "true") -> str:
    """One rule file's text: a daily schedule at a minute spread by `index`, one step."""
    return (
        f"id: bench-{index:06d}\n"
        f"name: Bench rule {index}\n"
        "triggers:\n"
        "  - type: schedule\n"
        f'    cron: "{index % 60} {index // 60 % 24} * * *"\n'
        "  - type: manual\n"
        "execution:\n"
        "  kind: built-in\n"
        "  actions:\n"
        "    - id: check\n"
        "      type: run-command\n"
        f'      command: "{command}"\n'
        "      timeout_sec: 60\n"
        "guardrails:\n"
        "  max_duration_min: 5\n"
        "  overlap: skip\n"
    )


def write_rules(directory: Path, count: int, *, edited: bool = False) -> None:
    """Write `count` rule files (`edited`: every EDIT_EVERY-th file with another command)."""
    directory.mkdir(exist_ok=True)
    for index in range(count):
        if edited and index % EDIT_EVERY:
            continue
        command = "echo edited" if edited else "true"
        (directory / f"bench-{index:06d}.yaml").write_text(rule_yaml(index, command))


def expected(phase: str, count: int) -> tuple[int, int, int]:
    """The (added, updated, unchanged) a phase must report."""
    edits = len(range(0, count, EDIT_EVERY))
    return {
        "first": (count, 0, 0),
        "unchanged": (0, 0, count),
        "edited": (0, edits, count - edits),
    }[phase]


def measure(admin_url: str, count: int, profile: bool) -> dict[str, float]:
    """Seconds per phase for `count` rules, in a scratch database of its own."""
    with (
        tempfile.TemporaryDirectory(prefix="ade-syncbench-") as tmp,
        scratch_database(admin_url, "ade_syncbench") as database_url,
    ):
        rules = Path(tmp) / "rules"
        write_rules(rules, count)
        engine = create_db_engine(database_url)
        try:
            upgrade(engine)
            factory = create_session_factory(engine)
            seconds: dict[str, float] = {}
            for phase in PHASES:
                if phase == "edited":
                    write_rules(rules, count, edited=True)
                profiler = cProfile.Profile() if profile and phase == "first" else None
                started = time.perf_counter()
                if profiler is not None:
                    profiler.enable()
                loaded, report = sync_rules_dir(factory, rules)
                if profiler is not None:
                    profiler.disable()
                seconds[phase] = time.perf_counter() - started
                got = (len(report.added), len(report.updated), len(report.unchanged))
                if loaded.problems or got != expected(phase, count):
                    raise BenchError(
                        f"{phase} sync of {count} rules reported (added, updated, unchanged) "
                        f"{got}, expected {expected(phase, count)}; problems: {loaded.problems[:3]}"
                    )
                if profiler is not None:
                    pstats.Stats(profiler, stream=sys.stderr).sort_stats("cumulative").print_stats(
                        30
                    )
        finally:
            engine.dispose()
    return seconds


def baseline(path: Path, admin_url: str, count: int) -> dict[str, float]:
    """The same phases with `ade_tasks` imported from another checkout (its own process)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ADE_")}
    env["PYTHONPATH"] = f"{path}{os.pathsep}{Path(__file__).resolve().parent.parent}"
    code = (
        "import json, sys; from bench.rules_sync import measure; "
        f"print(json.dumps(measure({admin_url!r}, {count}, False)))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode:
        # The last line naming an exception, without SQLAlchemy's echo of 100,000 parameters.
        errors = [line for line in done.stderr.splitlines() if "Error" in line[:80]]
        raise BenchError(f"the baseline at {path} failed: {(errors or ['?'])[-1][:300]}")
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def report(count: int, ours: dict[str, float], base: dict[str, float] | None) -> None:
    """One line per phase: seconds, rules/s, and the ratio to the baseline."""
    for phase in PHASES:
        line = f"{count:>7,} rules  {phase:<9} {ours[phase]:7.2f} s  {count / ours[phase]:9,.0f}/s"
        if base is not None:
            line += f"   baseline {base[phase]:7.2f} s  speed-up x{base[phase] / ours[phase]:.1f}"
        if phase == "first" and count >= TARGET_RULES:
            hit = ours[phase] * TARGET_RULES / count < TARGET_SECONDS
            line += (
                f"   target {TARGET_RULES:,} < {TARGET_SECONDS:.0f} s: {'OK' if hit else 'MISS'}"
            )
        print(line, flush=True)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--rules", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--baseline", type=Path, help="checkout of the code to compare against")
    parser.add_argument("--profile", action="store_true", help="cProfile the first sync")
    parser.add_argument("--admin-url", default=DEFAULT_ADMIN_URL, help="PostgreSQL admin URL")
    args = parser.parse_args(argv)
    if any(not 1 <= count <= MAX_RULES for count in args.rules):
        parser.error(f"need 1 <= --rules <= {MAX_RULES:,}")
    if args.baseline is not None and not (args.baseline / "ade_tasks").is_dir():
        parser.error(f"--baseline {args.baseline} holds no ade_tasks package")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, exit_on_sigterm)
    try:
        require_loopback(args.admin_url, "--admin-url")
        for count in args.rules:
            base = None
            if args.baseline is not None:
                try:
                    base = baseline(args.baseline, args.admin_url, count)
                except BenchError as exc:  # e.g. more rules than the old code can sync
                    print(f"{count:>7,} rules  {exc}", flush=True)
            report(count, measure(args.admin_url, count, args.profile), base)
    except BenchError as exc:
        print(f"bench failed: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
