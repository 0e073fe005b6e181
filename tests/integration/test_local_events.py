"""Local events end to end: `ade-tasks emit`, the git hooks and `ade-tasks watch` as real
processes against a real `ade-tasks api` and a real worker on PostgreSQL and Redis."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select

from ade_api.cli.git_hooks import EMIT_TIMEOUT_SECONDS
from ade_tasks.db.schema import IngressEventRow, RunRow
from tests.conftest import write_rule
from tests.integration.conftest import Cluster
from tests.support import BIN, Child, free_port, wait_until

ADE = str(BIN / "ade-tasks")
GIT_ENV = {
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_AUTHOR_NAME": "Ada",
    "GIT_AUTHOR_EMAIL": "ada@example.com",
    "GIT_COMMITTER_NAME": "Ada",
    "GIT_COMMITTER_EMAIL": "ada@example.com",
}


def rules_for(cluster: Cluster, rules: dict[str, str]) -> None:
    directory = cluster.tmp / "rules"
    for rule_id, trigger in rules.items():
        write_rule(
            directory,
            f"{rule_id}.yaml",
            f"id: {rule_id}\ntriggers: [{trigger}]\n"
            "execution: {kind: built-in, actions: [{type: run-command, command: 'true'}]}\n",
        )
    cluster.sync_rules(directory)


def events(cluster: Cluster) -> list[IngressEventRow]:
    with cluster.session_factory() as session:
        return list(session.scalars(select(IngressEventRow).order_by(IngressEventRow.id)))


def runs_of(cluster: Cluster) -> list[RunRow]:
    with cluster.session_factory() as session:
        return list(session.scalars(select(RunRow).order_by(RunRow.queued_at)))


def dispatched(cluster: Cluster) -> list[IngressEventRow]:
    """The events, once there is one and every one was matched to rules."""
    rows = events(cluster)
    return rows if rows and all(row.status == "dispatched" for row in rows) else []


def ade(cluster: Cluster, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:  # fmt: skip
    return subprocess.run(
        [ADE, *args], env={**cluster.env, **(env or {})}, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip


def git(cluster: Cluster, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", *args], cwd=cwd, env={**cluster.env, **GIT_ENV}, capture_output=True,
        text=True, timeout=60,
    )  # fmt: skip


@pytest.fixture
def api(cluster: Cluster) -> Iterator[httpx.Client]:
    client = cluster.api()
    yield client
    client.close()


def test_emit_starts_the_push_rule_of_the_branch_and_a_repeated_delivery_nothing(
    cluster: Cluster, api: httpx.Client
) -> None:
    # Given a rule for pushes to main and one for release branches, and a worker
    rules_for(
        cluster,
        {
            "on-main": "{type: git.push, repo: acme/api, branches: [main]}",
            "on-release": "{type: git.push, repo: acme/api, branches: ['release/*']}",
        },
    )
    cluster.worker()
    url = str(api.base_url)
    push = ["emit", "git.push", "--repo", "acme/api", "--branch", "main", "--url", url]

    # When a push to main is emitted
    first = ade(cluster, *push, "--delivery-id", "push-1")

    # Then the event is stored and only the main rule runs
    assert first.returncode == 0, first.stderr
    assert first.stdout.startswith("event ") and "(delivery push-1)" in first.stdout
    (event,) = wait_until(lambda: dispatched(cluster), 30, "the event to be dispatched")
    (run,) = runs_of(cluster)
    assert run.rule_id == "on-main" and event.runs == [run.id]
    assert run.trigger["branch"] == "main" and run.trigger["delivery_id"] == "push-1"

    # When the same delivery is emitted again
    again = ade(cluster, *push, "--delivery-id", "push-1")

    # Then nothing new is stored, so nothing can start
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith("duplicate: delivery push-1")
    assert len(events(cluster)) == 1 and len(runs_of(cluster)) == 1


def test_emit_shows_the_apis_reason_when_the_event_is_refused(
    cluster: Cluster, api: httpx.Client
) -> None:
    refused = ade(cluster, "emit", "lane.created", "--url", str(api.base_url))
    assert refused.returncode == 1
    assert "answered 422" in refused.stderr and "cannot be emitted locally" in refused.stderr
    assert events(cluster) == []


def test_emit_says_how_to_reach_an_api_that_is_not_running(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    done = subprocess.run(
        [ADE, "emit", "git.commit", "--url", url], capture_output=True, text=True, timeout=60,
        env={k: v for k, v in os.environ.items() if not k.startswith("ADE_")}, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 1
    assert f"cannot reach the ADE API at {url}" in done.stderr
    assert "ade-tasks dev" in done.stderr and "ADE_API_URL" in done.stderr


@pytest.fixture
def repo(cluster: Cluster) -> Path:
    """A clone named `api` with one commit on main."""
    path = cluster.tmp / "api"
    assert git(cluster, cluster.tmp, "init", "-q", "-b", "main", str(path)).returncode == 0
    (path / "README").write_text("hello\n")
    git(cluster, path, "add", ".")
    assert git(cluster, path, "commit", "-q", "-m", "Start").returncode == 0
    return path


def commit(cluster: Cluster, repo: Path, path: str, message: str) -> str:
    """Write `path`, commit it; returns the new sha (git must succeed)."""
    (repo / path).parent.mkdir(parents=True, exist_ok=True)
    (repo / path).write_text(message)
    git(cluster, repo, "add", ".")
    done = git(cluster, repo, "commit", "-q", "-m", message)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""  # the hook prints nothing into the commit
    return git(cluster, repo, "rev-parse", "HEAD").stdout.strip()


def test_a_commit_in_a_clone_with_the_hooks_starts_the_commit_rule(
    cluster: Cluster, api: httpx.Client, repo: Path
) -> None:
    # Given a git.commit rule for src/ on main, a worker, and the hooks in the clone
    rules_for(cluster, {"on-commit": "{type: git.commit, repo: api, branches: [main], paths: ['src/**']}"})  # fmt: skip
    cluster.worker()
    installed = ade(cluster, "hooks", "install", str(repo), "--url", str(api.base_url))
    assert installed.returncode == 0, installed.stderr

    # When a change under src/ is committed
    sha = commit(cluster, repo, "src/app.py", "Add the app")

    # Then (the hook runs in the background) the rule runs with the commit as its trigger
    (run,) = wait_until(lambda: runs_of(cluster), 30, "the git.commit rule to run")
    assert run.rule_id == "on-commit"
    assert run.trigger["head_sha"] == sha and run.trigger["paths"] == ["src/app.py"]
    assert run.trigger["title"] == "Add the app" and run.trigger["author"] == "Ada"
    assert run.trigger["delivery_id"] == f"git.commit:api:{sha}"


def test_the_hook_never_fails_or_holds_up_a_commit_when_the_api_is_down_or_hangs(
    cluster: Cluster, repo: Path
) -> None:
    # Given the hooks pointed at a closed port
    closed = f"http://127.0.0.1:{free_port()}"
    assert ade(cluster, "hooks", "install", str(repo), "--url", closed).returncode == 0

    # When a commit is made, Then git succeeds (commit() asserts it) and prints nothing extra
    commit(cluster, repo, "a.txt", "API down")

    # Given the hooks pointed at a server that accepts connections and never answers
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        hanging = f"http://127.0.0.1:{silent.getsockname()[1]}"
        assert ade(cluster, "hooks", "install", str(repo), "--url", hanging).returncode == 0

        # When a commit is made
        started = time.monotonic()
        commit(cluster, repo, "b.txt", "API hangs")
        took = time.monotonic() - started

        # Then git returned well before the hook's own timeout, and the hook did call
        silent.settimeout(30)
        connection, _ = silent.accept()
        connection.close()
    assert took < EMIT_TIMEOUT_SECONDS - 1, f"git commit took {took:.1f}s"


def test_watch_emits_changes_under_the_project_and_ignores_excluded_ones(
    cluster: Cluster, api: httpx.Client, project: Path
) -> None:
    # Given a file.changed rule for src/ without *.tmp, a worker, and `watch` on the default
    # project (ADE_PROJECTS__DEFAULT)
    rules_for(cluster, {"on-src": "{type: file.changed, paths: ['src/**'], exclude: ['**/*.tmp']}"})  # fmt: skip
    cluster.worker()
    (project / "src").mkdir()
    argv = [ADE, "watch", "--url", str(api.base_url), "--debounce-ms", "150"]
    watcher = Child(argv, cluster.env, cluster.tmp / "watch.log", cluster.tmp)
    cluster.children.append(watcher)
    wait_until(lambda: "watching" in watcher.output(), 30, f"watch to start ({watcher.log})")
    assert f"watching {project.resolve()} for changes" in watcher.output()

    # When ignored paths change (node_modules/, an excluded glob), then a real source file
    (project / "node_modules" / "pkg").mkdir(parents=True)
    (project / "node_modules" / "pkg" / "index.js").write_text("x")
    (project / "src" / "scratch.tmp").write_text("x")
    (project / "src" / "app.py").write_text("print('hi')\n")

    # Then one event arrives, holding only the real change, and the rule runs on it
    (event,) = wait_until(lambda: dispatched(cluster), 30, f"the event ({watcher.log})")
    assert event.source == "file" and event.payload["paths"] == ["src/app.py"]
    (run,) = wait_until(lambda: runs_of(cluster), 30, "the file.changed rule to run")
    assert run.rule_id == "on-src" and event.runs == [run.id]

    # When the watcher gets Ctrl-C, Then it stops cleanly
    watcher.signal(signal.SIGINT)
    try:
        assert watcher.proc.wait(30) == 0
    except subprocess.TimeoutExpired:
        pytest.fail(f"watch did not stop within 30 s of Ctrl-C; its output:\n{watcher.output()}")
    assert "stopped watching" in watcher.output()
    assert len(events(cluster)) == 1
