"""CLI start-up benchmark: `ade-tasks --version` and `ade-tasks runs list`, as a shell runs them.

In a scratch PostgreSQL database `ade_clibench_<pid>` (dropped at the end), `--history` finished
runs (default 10,000) are inserted as bench/history.py inserts them, and the real API is served
by uvicorn on 127.0.0.1 in this process; `runs list` reads its default first page (20 runs) from
it with a viewer token. Each command is a fresh process, started `--repeats` times (default 30,
at most 200) after one warm-up, the commands interleaved round by round so that a busy machine
slows all of them alike. Baselines, measured in the same rounds:

* `python -c pass`: the interpreter and site-packages start-up, which every command pays;
* the floor of `runs list` before it read its API address alone (ade_tasks/api_address.py)
  and sent its request through the standard library (ade_api/cli/plain_http.py): a process
  that imports click and httpx and builds the settings, without the command or its request;
* every command module imported (`import ade_api.cli.actions, ...`): what every command,
  `--version` included, imported before the command registry (ade_api/cli/registry.py).
* the request alone: `GET /api/v1/runs?limit=20` sent from this process over a kept-alive
  connection, so the part of `runs list` the API itself takes is known.

Printed: p50 / p90 of each, the ratio of its p50 to `python -c pass`'s, and the two commands
against the target of issue 37: under 300 ms at p50.

    .venv/bin/python bench/cli_startup.py [--repeats 30] [--history 10000]
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
from pathlib import Path

import httpx

from ade_api.cli import registry
from ade_tasks.access.roles import Role
from ade_tasks.clock import utcnow
from ade_tasks.db import tokens as tokens_db
from ade_tasks.db.engine import create_db_engine, create_session_factory
from ade_tasks.db.migrate import upgrade
from ade_tasks.settings import Settings
from bench.common import BenchError, machine_idle_seconds, percentile, scratch_database
from bench.run_history import ADMIN_URL, fill_history, serving
from bench.run_history import timed as timed_get

TARGET_S = 0.300
MAX_REPEATS = 200
BIN = Path(sys.executable).parent
PYTHON = [sys.executable, "-c"]
#: What `runs list` could not start without while it built the settings and used httpx.
FLOOR = "import click, httpx; from ade_tasks.settings import Settings; Settings()"
EVERY_MODULE = "import " + ", ".join(sorted(set(registry.ROOT.values()) |
                                            set(registry.RULES.values()) |
                                            set(registry.RUNS.values())))  # fmt: skip
BASELINE = "python -c pass"
REQUEST = "the request alone (GET /api/v1/runs)"


def commands() -> dict[str, list[str]]:
    """What is timed, by label; the first is the baseline the ratios are against."""
    cli = str(BIN / "ade-tasks")
    return {
        BASELINE: [*PYTHON, "pass"],
        "former floor (click, httpx, Settings)": [*PYTHON, FLOOR],
        "every command module (before)": [*PYTHON, EVERY_MODULE],
        "ade-tasks --version": [cli, "--version"],
        "ade-tasks runs list": [cli, "runs", "list"],
    }


def started(argv: list[str], env: dict[str, str], cwd: Path) -> float:
    """Seconds from start to exit of one process; a failure stops the bench."""
    begin = time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=60)
    seconds = time.perf_counter() - begin
    if done.returncode != 0:
        raise BenchError(f"{' '.join(argv[-3:])} exited {done.returncode}: {done.stderr[-500:]}")
    return seconds


def measure(
    client: httpx.Client, env: dict[str, str], repeats: int, cwd: Path
) -> dict[str, list[float]]:
    """Each command `repeats` times after one warm-up, interleaved round by round."""
    timed = commands()
    found: dict[str, list[float]] = {label: [] for label in timed}
    found[REQUEST] = []
    for label, argv in timed.items():
        started(argv, env, cwd)  # warm-up: page cache, .pyc files
        if label == "ade-tasks runs list":
            listed = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True,
                                    timeout=60).stdout  # fmt: skip
            if not listed.startswith("ID ") or len(listed.splitlines()) < 21:
                raise BenchError(f"runs list printed no page of runs: {listed[:300]!r}")
    for _ in range(repeats):
        for label, argv in timed.items():
            found[label].append(started(argv, env, cwd))
        found[REQUEST] += timed_get(client, "/api/v1/runs?limit=20", 1)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--history", type=int, default=10_000, help="finished runs in the API")
    args = parser.parse_args()
    if not 1 <= args.repeats <= MAX_REPEATS or not 1_000 <= args.history <= 1_000_000:
        raise BenchError(f"--repeats 1..{MAX_REPEATS} and --history 1,000..1,000,000, please")
    with scratch_database(ADMIN_URL, "ade_clibench") as url:
        engine = create_db_engine(url)
        upgrade(engine)
        sessions = create_session_factory(engine)
        fill_history(sessions, args.history, 20, end=utcnow())
        with sessions.begin() as session:
            _, token = tokens_db.create_token(session, "bench", Role.VIEWER, "cli_startup.py")
        with serving(Settings(database_url=url), sessions) as client, \
                tempfile.TemporaryDirectory() as cwd:  # fmt: skip
            env = {k: v for k, v in os.environ.items() if not k.startswith("ADE_")}
            env.update(ADE_API_URL=str(client.base_url).rstrip("/"), ADE_API_TOKEN=token,
                       ADE_ENV_FILE="")  # fmt: skip
            idle_before, wall_before = machine_idle_seconds(), time.monotonic()
            client.headers["Authorization"] = f"Bearer {token}"
            found = measure(client, env, args.repeats, Path(cwd))
            busy = 1 - (machine_idle_seconds() - idle_before) / (
                (time.monotonic() - wall_before) * (os.cpu_count() or 1)
            )
        engine.dispose()
    base = percentile(found[BASELINE], 50)
    print(f"\n{args.repeats} starts of each, interleaved; the machine's CPUs were {busy:.0%} busy "
          f"(load average {os.getloadavg()[0]:.2f}); ratios: p50 / `{BASELINE}` p50")  # fmt: skip
    for label, seconds in found.items():
        p50, p90 = percentile(seconds, 50), percentile(seconds, 90)
        verdict = ""
        if label.startswith("ade-tasks"):
            verdict = "  ok (< 300 ms)" if p50 < TARGET_S else "  MISS (>= 300 ms)"
        print(f"  {label:<40} p50 {p50 * 1000:7.1f} ms   p90 {p90 * 1000:7.1f} ms   "
              f"{p50 / base:5.1f}x{verdict}")  # fmt: skip


if __name__ == "__main__":
    try:
        main()
    except BenchError as exc:
        raise SystemExit(f"bench/cli_startup.py: {exc}") from exc
