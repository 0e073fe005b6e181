"""A running step's output reaches its followers as it is printed (issue 37, finding 1), on real
parts: a `celery worker`, an `ade-tasks api` process, PostgreSQL, Redis, and the CLI's `run
--wait` and `runs logs -f` as subprocesses. The step waits on a file the test creates, so every
line seen before that file exists was seen live. Masked across writes, capped like the stored
output, and a step printing 100 MB keeps the worker's memory flat and other runs flowing."""

from __future__ import annotations

import codecs
import os
import re
import subprocess
import threading
from pathlib import Path
from typing import Any

import httpx

from ade_tasks.db import run_events as run_events_db
from ade_tasks.db import run_steps as run_steps_db
from ade_workers.containment.process import OUTPUT_CAP
from tests.integration.conftest import Cluster
from tests.integration.test_run_path import add_rule, finished, run_row
from tests.integration.test_runs_api import sse, start
from tests.support import BIN, child_pids, wait_until

SECRET = "hunter2secret"
#: Prints a line, then the first five characters of the secret (flushed), then waits for the
#: test's `release` file before printing the rest of the secret: a secret split across writes.
LIVE = """\
echo "first line"
printf 'token=%s' "$(printf %s "$TOKEN" | cut -c1-5)"
while [ ! -e release ]; do sleep 0.05; done
printf '%s\\n' "$(printf %s "$TOKEN" | cut -c6-)"
"""
LIVE_STEP = (
    '            - {id: live, type: run-command, command: "sh live.sh",'
    " env: {TOKEN: '${env:LIVE_SECRET}'}}"
)
#: 100 MB of output, then a wait for `release`.
FLOOD = """\
head -c 100000000 /dev/zero | tr '\\0' 'x'
echo
while [ ! -e release ]; do sleep 0.05; done
echo done
"""


class Followed:
    """The API's event stream of one run, read in a thread: every (kind, event) so far."""

    def __init__(self, api: httpx.Client, run_id: str) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._read, args=(api, run_id), daemon=True)
        self._thread.start()

    def _read(self, api: httpx.Client, run_id: str) -> None:
        with httpx.Client(base_url=api.base_url, headers=api.headers) as client:
            with client.stream("GET", f"/api/v1/runs/{run_id}/events",
                               params={"follow": "true"},
                               timeout=httpx.Timeout(10, read=60)) as response:  # fmt: skip
                for _, kind, data in sse(response.iter_lines()):
                    with self._lock:
                        self.events.append((kind, data))
                    if kind == "end":
                        return

    def output(self) -> str:
        with self._lock:
            return "".join(d["data"]["text"] for k, d in self.events if k == "step.output")

    def kinds(self) -> list[str]:
        with self._lock:
            return [kind for kind, _ in self.events]


class Printed:
    """A CLI subprocess whose stdout is read as it prints (a line not yet ended included)."""

    def __init__(self, args: list[str], env: dict[str, str], cwd: Path) -> None:
        self.lines: list[str] = []
        self.process = subprocess.Popen(
            [str(BIN / "ade-tasks"), *args], env=env, cwd=cwd,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )  # fmt: skip
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        decoder = codecs.getincrementaldecoder("utf-8")()
        while chunk := os.read(self.process.stdout.fileno(), 65536):
            self.lines.append(decoder.decode(chunk))

    def text(self) -> str:
        return "".join(self.lines)

    def wait(self) -> str:
        """Everything it printed, once it exited."""
        self.process.wait(timeout=60)
        self._reader.join(timeout=5)
        return self.text()


def test_a_running_steps_output_reaches_run_wait_runs_logs_and_the_api_stream_masked(
    cluster: Cluster, project: Path
) -> None:
    # Given a step that prints a line and half a secret, then waits for the test
    (project / "live.sh").write_text(LIVE)
    add_rule(cluster, "live", LIVE_STEP)
    cluster.worker(env={"LIVE_SECRET": SECRET})
    api = cluster.api()
    env = {**cluster.env, "ADE_API_URL": str(api.base_url)}
    # When it is started with `run --wait`, and followed by `runs logs -f` and the API stream
    waiting = Printed(["run", "live", "--wait", "--timeout", "60"], env, cluster.tmp)
    match = wait_until(lambda: re.search(r"run ([0-9a-f-]{36})", waiting.text()), 20, "the run")
    run_id = match.group(1)
    logs = Printed(["runs", "logs", run_id, "-f"], env, cluster.tmp)
    followed = Followed(api, run_id)
    # Then its output so far is seen everywhere before the step may end
    wait_until(lambda: "token=" in followed.output(), 20, "the live output on the API stream")
    wait_until(lambda: "token=" in logs.text(), 20, "the live output in runs logs -f")
    wait_until(lambda: "| first line" in waiting.text(), 20, "the live output in run --wait")
    assert not (project / "release").exists()
    assert run_row(cluster, run_id).status == "running"
    assert followed.output().startswith("first line\ntoken=")
    assert "first line\ntoken=" in logs.text()
    # and no part of the secret is shown, though its first half was written and flushed
    for seen in (followed.output(), logs.text(), waiting.text()):
        assert SECRET[:5] not in seen
    # When the step is released, everything ends with the whole output, masked, shown once
    (project / "release").touch()
    assert "run " + run_id in logs.wait() and logs.process.returncode == 0
    assert waiting.wait().count("first line") == 1 and waiting.process.returncode == 0
    wait_until(lambda: "end" in followed.kinds(), 20, "the API stream to end")
    assert followed.output() == "first line\ntoken=***\n"
    assert logs.text().count("first line") == 1 and "token=***\n" in logs.text()
    assert "      | token=***" in waiting.text()
    for seen in (followed.output(), logs.text(), waiting.text()):
        assert SECRET[:5] not in seen and "2secret" not in seen
    # and `runs logs` of the finished run prints the same output
    again = subprocess.run([str(BIN / "ade-tasks"), "runs", "logs", run_id], env=env,
                           capture_output=True, text=True, timeout=60)  # fmt: skip
    assert again.returncode == 0 and "first line\ntoken=***\n" in again.stdout


def _peak_kib(pids: list[int]) -> int:
    """The summed peak resident memory (VmHWM) of live processes."""
    total = 0
    for pid in pids:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except FileNotFoundError:
            continue
        total += int(re.search(r"VmHWM:\s+(\d+)", status).group(1))  # type: ignore[union-attr]
    return total


def test_a_step_printing_100_mb_is_capped_live_and_stored_and_other_runs_keep_flowing(
    cluster: Cluster, project: Path
) -> None:
    # Given a step that prints 100 MB, then waits; and a quick rule beside it
    (project / "flood.sh").write_text(FLOOD)
    add_rule(cluster, "flood", "            - {id: flood, type: run-command, command: sh flood.sh}")
    add_rule(cluster, "quick", "            - {id: quick, type: run-command, command: echo quick}")
    worker = cluster.worker(concurrency=2)
    api = cluster.api()
    pool = child_pids(worker.pid)
    before = _peak_kib(pool)
    # When the flood runs
    flood = start(cluster, "flood")
    followed = Followed(api, flood)
    env = {**cluster.env, "ADE_API_URL": str(api.base_url)}
    logs = Printed(["runs", "logs", flood, "-f"], env, cluster.tmp)
    # Then its live output stops at the cap and says so, while the step still runs
    wait_until(lambda: any(k == "step.output" and d["data"].get("capped")
                           for k, d in followed.events), 60, "the cap event")  # fmt: skip
    stops = f"\n[... live output stops at {OUTPUT_CAP} characters; "
    wait_until(lambda: stops in logs.text(), 20, "runs logs -f to say the live output stops")
    # and another run starts, runs and ends through its own stream meanwhile
    quick = start(cluster, "quick")
    with httpx.Client(base_url=api.base_url, headers=api.headers) as client:
        with client.stream("GET", f"/api/v1/runs/{quick}/events", params={"follow": "true"},
                           timeout=httpx.Timeout(10, read=30)) as response:  # fmt: skip
            kinds = [kind for _, kind, _ in sse(response.iter_lines()) if kind != "keep-alive"]
    assert kinds[-1] == "end" and "step.finished" in kinds
    assert not (project / "release").exists()
    (project / "release").touch()
    row = finished(cluster, flood, timeout=120)
    assert row.status == "succeeded"
    wait_until(lambda: "end" in followed.kinds(), 20, "the flood's stream to end")
    printed = logs.wait()
    assert printed.count(stops) == 1 and printed.count("x" * OUTPUT_CAP + stops) == 1
    # and the live output holds no more than the stored output's cap, in few events
    with cluster.session_factory() as session:
        live = [data for kind, data in run_events_db.events_of(session, flood, "step.output")]
        stored = run_steps_db.list_steps(session, flood)[0].output
    assert sum(len(data["text"]) for data in live) == OUTPUT_CAP
    assert live[-1]["capped"] == OUTPUT_CAP and len(live) <= 5
    assert followed.output() == "x" * OUTPUT_CAP
    assert len(stored) <= OUTPUT_CAP + 100 and stored.rstrip().endswith("done")
    # and the worker read 100 MB without holding it: its pool's peak memory barely moved
    grown_mib = (_peak_kib(pool) - before) / 1024
    assert grown_mib < 40, f"the worker's pool grew by {grown_mib:.0f} MiB reading 100 MB"
