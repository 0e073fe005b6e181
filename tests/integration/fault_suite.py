"""The fault suite's load and tally: the cluster under real faults loses, duplicates, strands and
wrongly fails nothing.

Each scenario (tests/integration/test_faults_*.py) drives manual runs through a real
`ade-tasks api` into real `celery worker` processes on real PostgreSQL and a real broker, injects
its fault, heals it, and then counts per run (printed at the end of the test session, asserted 0):
- lost: a run the API accepted (202) that has no row;
- duplicated: more than one row for one Idempotency-Key, or a command that completed twice for
  one run (each command appends its run id and the time to a ledger file as its last act);
- stuck: a run that is not finished by the scenario's deadline;
- wrongly failed: a run that did not succeed (every step may be retried, and every fault here is
  one a run is promised to survive).
"""

from __future__ import annotations

import collections
import os
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import UTC
from pathlib import Path

import httpx
from sqlalchemy import select

from ade_tasks.db import run_events as run_events_db
from ade_tasks.db.retry import retrying
from ade_tasks.db.schema import RunRow
from tests.integration.conftest import Cluster
from tests.integration.test_run_path import FINISHED, add_rule
from tests.support import FAULT_REPORTS

#: The work of every run: half a second of sleep, then its completion in the ledger.
SLEEP = 0.5
RULE = "steady"
CONCURRENCY = 4
#: The ledger line of a command's completion: its run id and the wall-clock time.
LEDGER_LINE = "echo $ADE_RUN_ID $(date +%s.%N) >> ledger"


@dataclass(frozen=True)
class Tally:
    """What became of a scenario's runs."""

    scenario: str
    runs: int
    lost: int
    duplicated: int
    stuck: int
    wrongly_failed: int

    def line(self) -> str:
        return (
            f"{self.scenario}: {self.runs} runs; lost {self.lost}, duplicated {self.duplicated}, "
            f"stuck {self.stuck}, wrongly failed {self.wrongly_failed}"
        )


def steady_rule(cluster: Cluster, sleep: float = SLEEP) -> Path:
    """The scenarios' rule (steps retried, as a rule that must survive faults says); its ledger."""
    add_rule(
        cluster,
        RULE,
        f'            - {{id: work, type: run-command, retry: 2, command: "sleep {sleep}; '
        f'{LEDGER_LINE}"}}',
    )
    return cluster.settings.project_root("default") / "ledger"


def completions(ledger: Path) -> list[tuple[str, float]]:
    """(run id, wall-clock time) of every completed command, in order. Every line counts,
    even one without its time (NaN), so a malformed line can never hide a duplicate."""
    if not ledger.exists():
        return []
    lines = (line.split() for line in ledger.read_text().splitlines())
    return [
        (fields[0], float(fields[1]) if len(fields) > 1 else float("nan"))
        for fields in lines
        if fields
    ]


class Load:
    """Manual runs posted from a thread, each with an Idempotency-Key of its own, retried with
    the same key until the API accepts it (as a careful client does through a 503)."""

    def __init__(self, api: httpx.Client, runs: int, pause: float = 0.02) -> None:
        self.api = api
        self.runs = runs
        self.pause = pause
        self.accepted: dict[str, str] = {}  # idempotency key -> run id
        self.answers: collections.Counter[int] = collections.Counter()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Load:
        self._thread.start()
        return self

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)
        assert not self._thread.is_alive(), f"posting {self.runs} runs took over {timeout}s"
        if self.error is not None:
            raise AssertionError(f"posting runs failed: {self.error}") from self.error
        assert self.done() == self.runs, f"{self.done()} of {self.runs} runs accepted"

    def _run(self) -> None:
        try:
            self._post_all()
        except BaseException as exc:  # reported by join()
            self.error = exc

    def _post_all(self) -> None:
        for _ in range(self.runs):
            key = uuid.uuid4().hex
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                try:
                    answer = self.api.post(
                        f"/api/v1/rules/{RULE}/runs", headers={"Idempotency-Key": key}
                    )
                except httpx.TransportError:
                    self.answers[0] += 1
                else:
                    self.answers[answer.status_code] += 1
                    if answer.status_code == 202:
                        self.accepted[key] = answer.json()["run_id"]
                        break
                    assert answer.status_code == 503, answer.text
                time.sleep(0.2)
            time.sleep(self.pause)

    def done(self) -> int:
        return len(self.accepted)


def tally(
    cluster: Cluster,
    scenario: str,
    load: Load,
    ledger: Path,
    timeout: float,
    faults: dict[float, str] | None = None,
) -> Tally:
    """Wait up to `timeout` for every accepted run to finish, then count what went wrong.

    `faults` (wall-clock time -> what was done) goes into the message of a failure, next to
    when each duplicated command completed."""
    ids = set(load.accepted.values())

    def rows() -> list[RunRow]:  # the test's own connections may have been terminated too
        return retrying(
            cluster.session_factory,
            lambda session: list(session.scalars(select(RunRow).where(RunRow.rule_id == RULE))),
        )

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        current = rows()
        if all(r.status in FINISHED for r in current if r.id in ids) and ids <= {
            r.id for r in current
        }:
            break
        time.sleep(0.25)
    current = rows()
    by_id = {r.id: r for r in current}
    keys = collections.Counter(r.idempotency_key for r in current)
    completed = completions(ledger)
    counts = collections.Counter(run_id for run_id, _ in completed)
    report = Tally(
        scenario=scenario,
        runs=len(ids),
        lost=sum(1 for run_id in ids if run_id not in by_id),
        duplicated=sum(1 for n in keys.values() if n > 1)
        + sum(1 for n in counts.values() if n > 1),
        stuck=sum(1 for r in current if r.id in ids and r.status not in FINISHED),
        wrongly_failed=sum(
            1 for r in current if r.id in ids and r.status in FINISHED and r.status != "succeeded"
        ),
    )
    FAULT_REPORTS.append(report.line())
    failures = [f"{r.id} {r.status}: {r.error}" for r in current if r.status == "failed"][:5]
    failures += [
        f"{run_id} completed {n} times (at {[round(t, 3) for r, t in completed if r == run_id]}), "
        f"attempt {by_id[run_id].attempt}, events {run_events(cluster, run_id)}"
        for run_id, n in counts.items()
        if n > 1 and run_id in by_id
    ][:5]
    assert (report.lost, report.duplicated, report.stuck, report.wrongly_failed) == (
        0, 0, 0, 0
    ), f"{report.line()}; answers {dict(load.answers)}; faults {faults}; failed: {failures}"  # fmt: skip
    return report


def run_events(cluster: Cluster, run_id: str) -> list[tuple[float, str, dict[str, object]]]:
    """The run's `run.*` events: (wall-clock time, kind, data)."""
    events = run_events_db.EVENTS
    with cluster.session_factory() as session:
        rows = session.execute(
            select(events.c.at, events.c.kind, events.c.data)
            .where(events.c.run_id == run_id, events.c.kind.startswith("run."))
            .order_by(events.c.id)
        )
        return [
            (round(at.replace(tzinfo=UTC).timestamp(), 3), kind, data) for at, kind, data in rows
        ]


def descendants(root: int) -> list[tuple[int, str, float]]:
    """(pid, command name, age in seconds) of every live descendant of `root`."""
    parents: dict[int, int] = {}
    info: dict[int, tuple[str, float]] = {}
    ticks = os.sysconf("SC_CLK_TCK")
    with open("/proc/uptime") as uptime:
        now = float(uptime.read().split()[0])
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                head, rest = stat.read().rsplit(") ", 1)
        except OSError:
            continue
        fields = rest.split()
        if fields[0] == "Z":
            continue
        parents[int(entry)] = int(fields[1])
        info[int(entry)] = (head.split(" (", 1)[1], now - int(fields[19]) / ticks)
    found = []
    for pid in parents:
        ancestor = parents.get(pid)
        while ancestor and ancestor != root:
            ancestor = parents.get(ancestor)
        if ancestor == root:
            found.append((pid, *info[pid]))
    return found
