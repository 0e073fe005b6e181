"""Cancel benchmark: seconds from `cancel_run` committing to the cancelled command being gone.

What it measures, in one run, on the real run path (`execute_run` in a thread, the real
run-command executor and its contained process, a scratch SQLite database; no servers): a rule
whose one step runs `sleep 120` is started, and after a random wait (uniform over one heartbeat
interval, so the cancel lands at a random phase of the lease renewals) the run is cancelled the
way the API does it. Reported per side: p50 / max of cancel -> the command's pid gone, and the
ratio of the medians.

- baseline: the worker notices only when its next lease renewal fails (`CANCEL_CHECK` off), as
  before cancels had a signal of their own: about heartbeat/2 on average, a whole heartbeat at
  worst;
- ADE: the worker reads the run's row every `CANCEL_CHECK` seconds.

Run it from the repository root (takes about `samples` x 1.5 heartbeats for the baseline):

    .venv/bin/python bench/cancel.py [--samples 3] [--heartbeat 15]
"""

from __future__ import annotations

import sys as _sys
from pathlib import Path as _Path

if __package__ in (None, ""):  # run as `python bench/cancel.py`: import `bench.*` from the repo
    _sys.path.insert(0, str(_Path(__file__).resolve().parent.parent))

import argparse
import math
import random
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from ade_tasks.db import run_cancels as run_cancels_db
from ade_tasks.db.engine import create_db_engine, create_session_factory
from ade_tasks.db.migrate import upgrade
from ade_tasks.rule_files.sync import sync_rules_dir
from ade_tasks.runs.dispatch import dispatch
from ade_tasks.runs.trigger_events import TriggerEvent
from ade_tasks.settings import Settings
from ade_tasks.testing import InMemorySender
from ade_workers.engine import run_monitor, runner
from ade_workers.engine.runner_config import RunnerConfig
from bench.common import BenchError, percentile

T = TypeVar("T")
RULE = """\
id: long
triggers: [{type: manual}]
execution:
  kind: built-in
  actions: [{id: wait, type: run-command, command: "echo $$ > pid; exec sleep 120"}]
"""


def pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(") ", 1)[1][0] != "Z"
    except FileNotFoundError:
        return False


def wait_for(check: Callable[[], T], timeout: float, what: str) -> T:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.01)
    raise BenchError(f"timed out after {timeout}s waiting for {what}")


def one_cancel(root: Path, heartbeat: float) -> float:
    """Start a run, cancel it at a random moment of its heartbeat cycle; seconds to stopped."""
    settings = Settings(
        data_dir=root / ".ade",
        projects={"default": root},
        heartbeat_seconds=heartbeat,
        lease_seconds=4 * heartbeat,
    )
    factory = create_session_factory(create_db_engine(settings.effective_database_url))
    run_id = dispatch(factory, InMemorySender(), "long", TriggerEvent.manual()).run.id
    pid_file = root / "pid"
    pid_file.unlink(missing_ok=True)
    config = RunnerConfig.from_settings(settings)
    worker = threading.Thread(
        target=runner.execute_run, args=(factory, config, run_id, "bench:1"), daemon=True
    )
    worker.start()
    pid = wait_for(lambda: pid_file.exists() and int(pid_file.read_text() or 0), 20, "the step")
    time.sleep(random.uniform(0, heartbeat))
    with factory.begin() as session:
        run_cancels_db.cancel_run(session, run_id, "bench")
    began = time.monotonic()
    wait_for(lambda: not pid_alive(pid), 3 * heartbeat, "the cancelled command to stop")
    elapsed = time.monotonic() - began
    worker.join(30)
    return elapsed


def measure(root: Path, samples: int, heartbeat: float, cancel_check: float) -> list[float]:
    run_monitor.CANCEL_CHECK = cancel_check
    return [one_cancel(root, heartbeat) for _ in range(samples)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=3)
    parser.add_argument("--heartbeat", type=float, default=15.0, help="heartbeat_seconds")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ade-cancel-bench-") as tmp:
        root = Path(tmp)
        (root / "rules").mkdir()
        (root / "rules" / "long.yaml").write_text(RULE)
        engine = create_db_engine(f"sqlite:///{root / '.ade' / 'ade.db'}")
        (root / ".ade").mkdir(exist_ok=True)
        upgrade(engine)
        loaded, _ = sync_rules_dir(create_session_factory(engine), root / "rules")
        if loaded.problems:
            raise BenchError(f"the bench rule did not load: {loaded.problems}")
        shipped = run_monitor.CANCEL_CHECK
        baseline = measure(root, args.samples, args.heartbeat, math.inf)
        ade = measure(root, args.samples, args.heartbeat, shipped)
    for name, values in (("baseline (heartbeat only)", baseline), ("ADE (row check)", ade)):
        print(
            f"{name:28} cancel -> stopped  p50 {percentile(values, 50):6.2f}s  "
            f"max {max(values):6.2f}s  ({len(values)} cancels, heartbeat {args.heartbeat:g}s)"
        )
    print(f"ratio of medians: {percentile(baseline, 50) / percentile(ade, 50):.1f}x faster")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as exc:
        print(f"bench failed: {exc}", file=sys.stderr)
        sys.exit(1)
