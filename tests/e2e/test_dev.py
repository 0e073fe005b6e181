"""`ade-tasks dev` and the CLI driven as a newcomer drives them: no servers, two terminals."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from ade_tasks.db.engine import create_db_engine, create_session_factory
from ade_tasks.db.migrate import upgrade
from ade_tasks.rule_files.sync import sync_rules_dir
from ade_tasks.runs.dispatch import dispatch
from ade_tasks.runs.trigger_events import TriggerEvent
from ade_tasks.testing import InMemorySender
from tests.conftest import REPO, write_rule
from tests.support import BIN, Child, child_env, free_port, host_pid, pid_alive, wait_until
from tests.tracked import copy_tracked


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """A fresh directory holding a copy of the shipped rules, as a clone would (the tracked
    files only: a developer's own rule in config/rules must not change what the tests see)."""
    copy_tracked(REPO / "config", tmp_path / "config")
    write_rule(
        tmp_path / "config" / "rules",
        "zz-slow.yaml",
        """
        id: slow
        triggers: [{type: manual}]
        execution:
          kind: built-in
          actions: [{id: wait, type: run-command, command: "echo $$ > slow.pid; exec sleep 120"}]
        """,
    )
    return tmp_path


class Dev:
    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        # As `make dev` starts it: the virtualenv's bin first on PATH, so rule commands such as
        # `python3 -m pytest` use it (the sandbox shows it to them read-only).
        self.env = child_env({"PATH": f"{BIN}:{os.environ['PATH']}"})
        self.child: Child | None = None

    def start(self) -> Child:
        self.child = Child(
            [str(BIN / "ade-tasks"), "dev", "--port", str(self.port)],
            self.env,
            self.workdir / f"dev-{self.port}.log",
            cwd=self.workdir,
        )
        wait_until(
            lambda: httpx.get(f"{self.url}/healthz").status_code == 200,
            30,
            f"ade-tasks dev to serve (log: {self.child.log})",
        )
        return self.child

    def cli(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(BIN / "ade-tasks"), *args, "--url", self.url],
            cwd=self.workdir,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def get(self, path: str, **kwargs: Any) -> httpx.Response:
        """An API GET with the admin token `ade-tasks dev` wrote for this directory."""
        token = (self.workdir / ".ade" / "api-token").read_text().strip()
        headers = {"Authorization": f"Bearer {token}"}
        return httpx.get(f"{self.url}{path}", headers=headers, **kwargs)

    def interrupt(self) -> int:
        """Ctrl-C, as a user at the terminal sends it; returns the exit status."""
        assert self.child is not None
        self.child.proc.send_signal(signal.SIGINT)
        return self.child.proc.wait(timeout=30)


@pytest.fixture
def dev(workdir: Path) -> Iterator[Dev]:
    harness = Dev(workdir)
    yield harness
    if harness.child is not None:
        harness.child.stop()


def test_a_newcomer_runs_an_example_rule_and_reads_it_back(dev: Dev) -> None:
    child = dev.start()
    assert f"API on {dev.url}" in child.output()

    ran = dev.cli("run", "hello", "--wait")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "hello from" in ran.stdout and "succeeded" in ran.stdout
    run_id = ran.stdout.split()[1].rstrip(":")

    listed = dev.cli("runs", "list")
    assert run_id[:8] in listed.stdout and "hello" in listed.stdout  # the short id
    shown = dev.cli("runs", "show", run_id[:8])
    assert "status succeeded" in shown.stdout and "greet" in shown.stdout

    failing = dev.cli("run", "run-tests", "--input", "target=does-not-exist", "--wait")
    assert failing.returncode == 1
    assert "failed" in failing.stdout and "does-not-exist" in failing.stdout

    unknown = dev.cli("run", "no-such-rule")
    assert unknown.returncode == 1 and "rule 'no-such-rule' does not exist" in unknown.stderr

    assert dev.interrupt() == 0
    assert "stopped" in child.output()


def test_cli_without_a_running_api_says_how_to_start_one(dev: Dev) -> None:
    result = dev.cli("runs", "list")
    assert result.returncode == 1
    assert "cannot reach the ADE API" in result.stderr and "ade-tasks dev" in result.stderr


def test_a_queued_run_survives_a_restart(dev: Dev, workdir: Path) -> None:
    # Given a run recorded while no broker held its message (the last dev process died)
    engine = create_db_engine(f"sqlite:///{workdir / '.ade' / 'ade.db'}")
    upgrade(engine)
    factory = create_session_factory(engine)
    sync_rules_dir(factory, workdir / "config" / "rules")
    down = InMemorySender()
    down.down = True
    run_id = dispatch(factory, down, "hello", TriggerEvent.manual()).run.id
    engine.dispose()
    # When dev starts
    dev.start()
    # Then the recovery sweep re-sends it and it runs
    detail = wait_until(
        lambda: (r := dev.get(f"/api/v1/runs/{run_id}").json())["status"] == "succeeded" and r,
        30,
        "the queued run to run after the restart",
    )
    assert detail["steps"][0]["output"].startswith("hello from")


def test_ctrl_c_stops_running_commands_and_cancels_their_runs(dev: Dev, workdir: Path) -> None:
    child = dev.start()
    started = dev.cli("run", "slow")
    run_id = started.stdout.split()[1].rstrip(":")
    pid_file = workdir / "slow.pid"
    command_pid = wait_until(
        lambda: pid_file.exists() and host_pid(int(pid_file.read_text()), child.proc.pid),
        20,
        "the command",
    )

    assert dev.interrupt() == 0
    assert not pid_alive(command_pid)
    assert "stopped" in child.output()

    dev.start()
    detail = dev.get(f"/api/v1/runs/{run_id}").json()
    assert detail["status"] == "cancelled"
    assert "shut down" in detail["error"]


def test_dev_refuses_a_taken_port_with_advice(dev: Dev) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", dev.port))
        taken.listen()
        result = subprocess.run(
            [str(BIN / "ade-tasks"), "dev", "--port", str(dev.port)],
            cwd=dev.workdir,
            env=dev.env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert result.returncode == 1
    assert f"cannot listen on 127.0.0.1:{dev.port}" in result.stderr and "--port" in result.stderr
    assert not (dev.workdir / ".ade").exists()  # refused before touching anything


def test_sigterm_stops_dev_as_cleanly_as_ctrl_c(dev: Dev, workdir: Path) -> None:
    child = dev.start()
    dev.cli("run", "slow")
    pid_file = workdir / "slow.pid"
    command_pid = wait_until(
        lambda: pid_file.exists() and host_pid(int(pid_file.read_text()), child.proc.pid),
        20,
        "the command",
    )
    child.proc.send_signal(signal.SIGTERM)
    assert child.proc.wait(timeout=30) == 0
    assert "stopped" in child.output()
    assert not pid_alive(command_pid)


def test_schedule_preview_and_occurrences_from_the_cli(dev: Dev) -> None:
    dev.start()
    preview = dev.cli("rules", "next", "nightly-disk-report", "-n", "3")
    assert preview.returncode == 0, preview.stderr
    assert "trigger #0: 0 3 * * 1-5 (Europe/Berlin)" in preview.stdout
    local_times = [line.split()[1] for line in preview.stdout.splitlines() if "local" in line]
    assert local_times == ["03:00", "03:00", "03:00"]
    as_json = dev.get("/api/v1/rules/nightly-disk-report/schedule", params={"count": 2}).json()
    (trigger,) = as_json["triggers"]
    assert len(trigger["next"]) == 2
    first = datetime.fromisoformat(trigger["next"][0]["utc"].replace("Z", "+00:00"))
    assert first.utcoffset() == timedelta(0) and first.hour in (1, 2)  # 03:00 in Berlin
    none = dev.cli("rules", "next", "hello")
    assert none.returncode == 0 and "has no schedule triggers" in none.stdout
    history = dev.cli("rules", "occurrences", "nightly-disk-report")
    assert history.returncode == 0 and history.stdout == ""
    missing = dev.cli("rules", "next", "nope")
    assert missing.returncode == 1 and "rule 'nope' does not exist" in missing.stderr


def dispatched(dev: Dev, event_id: int) -> dict[str, Any] | None:
    """The ingress event once the workers dispatched it."""
    for event in dev.get("/api/v1/ingress/events").json()["items"]:
        if event["id"] == event_id and event["status"] == "dispatched":
            return dict(event)
    return None


def test_an_emitted_event_is_stored_handed_over_and_run_in_dev(dev: Dev, workdir: Path) -> None:
    write_rule(
        workdir / "config" / "rules",
        "zz-on-commit.yaml",
        """
        id: on-commit
        triggers: [{type: git.commit, repo: acme/api}]
        execution:
          kind: built-in
          actions: [{type: run-command, command: "echo committed {{trigger.head_sha}}"}]
        """,
    )
    dev.start()

    emitted = dev.cli("emit", "git.commit", "--repo", "acme/api", "--sha", "abc123", "--json")
    assert emitted.returncode == 0, emitted.stdout + emitted.stderr
    event_id = json.loads(emitted.stdout)["event_id"]

    # SQLite and the in-memory broker: the event row is written from a thread, the publisher
    # thread hands it to the embedded worker, which starts the rule's run.
    event = wait_until(lambda: dispatched(dev, event_id), 30, "the event to be dispatched")
    (run_id,) = event["runs"]
    run = wait_until(
        lambda: (r := dev.get(f"/api/v1/runs/{run_id}").json())["status"] == "succeeded" and r,
        30,
        "the run to succeed",
    )
    assert run["rule_id"] == "on-commit"


def test_dev_matches_events_while_every_run_thread_is_busy(dev: Dev, workdir: Path) -> None:
    # Given dev, its run worker's two threads each holding a slow run, and a rule on commits
    write_rule(
        workdir / "config" / "rules",
        "zz-on-commit.yaml",
        """
        id: on-commit
        triggers: [{type: git.commit, repo: acme/api}]
        execution: {kind: built-in, actions: [{type: run-command, command: "true"}]}
        """,
    )
    child = dev.start()
    assert "2 threads on ade.builtin, ade.agent; 2 on ade.ingress, ade.control" in child.output()
    slow = [dev.cli("run", "slow").stdout.split()[1].rstrip(":") for _ in range(2)]
    wait_until(
        lambda: all(dev.get(f"/api/v1/runs/{r}").json()["status"] == "running" for r in slow),
        20,
        "both slow runs to hold a run thread",
    )

    # When a commit event arrives
    emitted = dev.cli("emit", "git.commit", "--repo", "acme/api", "--sha", "abc123", "--json")
    assert emitted.returncode == 0, emitted.stdout + emitted.stderr

    # Then the ingress worker matches it at once, its run waiting for a run thread instead
    event = wait_until(
        lambda: dispatched(dev, json.loads(emitted.stdout)["event_id"]),
        10,
        "the event to be matched while the run threads are busy",
    )
    (run_id,) = event["runs"]
    assert dev.get(f"/api/v1/runs/{run_id}").json()["status"] == "queued"


def test_a_plan_mode_session_in_dev_never_reads_or_shows_the_stacks_token(
    dev: Dev, workdir: Path
) -> None:
    # Given dev's data dir inside the project root, and a plan-mode agent that goes for the token
    from sqlalchemy import text as sql

    from tests.fake_llm import ScriptedModelServer
    from tests.integration.agent_run_support import text, tool_calls

    write_rule(
        workdir / "config" / "rules",
        "zz-agent.yaml",
        """
        id: snoop
        triggers: [{type: manual}]
        execution:
          kind: agent-session
          provider: openai
          model: gpt-4o-mini
          permission_mode: plan
          prompt: "Summarise the project."
        """,
    )
    with ScriptedModelServer() as llm:
        providers = {"openai": {"base_url": llm.url, "api_key": "sk-test-key"}}
        dev.env = {**dev.env, "ADE_PROVIDERS": json.dumps(providers)}
        dev.start()
        token = (workdir / ".ade" / "api-token").read_text().strip()
        llm.script(
            tool_calls(
                ("c1", "read_file", {"path": ".ade/api-token"}),
                ("c2", "grep", {"pattern": re.escape(token[:12]), "path": "."}),
                ("c3", "list_dir", {"path": "."}),
            ),
            text("nothing to see"),
        )

        # When the session runs
        ran = dev.cli("run", "snoop", "--wait")

        # Then it succeeded without the token reaching the model or the run's events
        assert ran.returncode == 0, ran.stdout + ran.stderr
        sent = json.dumps([request.json for request in llm.requests])
    engine = create_db_engine(f"sqlite:///{workdir / '.ade' / 'ade.db'}")
    with engine.connect() as connection:
        events = [row[0] for row in connection.execute(sql("SELECT data FROM run_events"))]
    engine.dispose()
    recorded = json.dumps(events)
    assert token not in sent and token not in recorded
    results = {
        data["tool_call_id"]: data["content"]
        for data in (json.loads(e) if isinstance(e, str) else e for e in events)
        if "tool_call_id" in data and "content" in data
    }
    assert "the engine's own data" in results["c1"]
    assert results["c2"] == "[no matches]" and ".ade/" not in results["c3"].split()
    # And the data dir keeps itself out of git
    assert (workdir / ".ade" / ".gitignore").read_text().endswith("*\n")
