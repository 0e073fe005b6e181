"""`ade-tasks doctor` against real services: a healthy cluster (PostgreSQL, Redis, a real worker
and beat, a GitHub on 127.0.0.1 accepting the token) passes; a wrong database URL, a broker that
is down, no workers or beats, a GitHub answering 401 or lacking scopes, and no bubblewrap on
PATH each fail their line with what to do; a broker that never answers is cut off in time."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from ade_tasks.db import heartbeats as heartbeats_db
from ade_tasks.settings import Settings
from ade_workers.doctor.check import Probe, Verdict, run_check
from ade_workers.doctor.checks import CHECKS
from tests.integration.conftest import Cluster
from tests.integration.test_cli_cluster import cli
from tests.support import free_port, wait_until


@contextmanager
def github(status: int, scopes: str | None) -> Iterator[str]:
    """A GitHub on 127.0.0.1 answering `GET /user` with `status` and `X-OAuth-Scopes: scopes`."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            ok = status == 200 and self.path == "/user"
            body = json.dumps({"login": "ade-bot"} if ok else {"message": "Bad credentials"})
            self.send_response(status if self.path == "/user" else 404)
            self.send_header("Content-Type", "application/json")
            if scopes is not None:
                self.send_header("X-OAuth-Scopes", scopes)
            self.end_headers()
            self.wfile.write(body.encode())

        def log_message(self, *_args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def lines(output: str) -> dict[str, str]:
    """Each check's line (verdict and detail, with its `fix:` line) by the check's name."""
    found: dict[str, str] = {}
    name = ""
    for line in output.splitlines():
        if line.startswith(" ") and name:
            found[name] += "\n" + line.strip()
        elif line.split(" ", 1)[0] in {check.name for check in CHECKS}:
            name, rest = line.split(" ", 1)
            found[name] = rest.strip()
    return found


def verdicts(output: str) -> dict[str, str]:
    return {name: text.split(" ", 1)[0] for name, text in lines(output).items()}


def test_a_healthy_cluster_passes_every_check(cluster: Cluster) -> None:
    # Given a worker on the run queues, one on ingress and control (the deployment examples'
    # split), a live beat and a token with the `repo` scope
    cluster.worker(queues="ade.builtin,ade.agent")
    cluster.worker(queues="ade.ingress,ade.control")
    cluster.beat()
    with cluster.session_factory() as session:
        wait_until(
            lambda: any(b.kind == heartbeats_db.BEAT for b in heartbeats_db.recent(session)),
            30,
            "the beat's heartbeat",
        )
    with github(200, "repo, workflow") as api_url:
        env = {**cluster.env, "ADE_GITHUB__API_URL": api_url, "ADE_GITHUB__TOKEN": "ghp_test"}

        # When the doctor runs
        done = cli(cluster, "doctor", env=env)

    # Then every check passes (no provider is configured: a warning) and it exits 0
    assert done.returncode == 0, done.stdout + done.stderr
    assert verdicts(done.stdout) == {
        "settings": "ok",
        "database": "ok",
        "schema": "ok",
        "broker": "ok",
        "workers": "ok",
        "beats": "ok",
        "providers": "warn",
        "github": "ok",
        "sandbox": "ok",
    }
    found = lines(done.stdout)
    assert "token of ade-bot accepted, scopes: repo, workflow" in found["github"]
    assert "ade.builtin: 1 worker(s)" in found["workers"]
    assert "ade.ingress: 1 worker(s)" in found["workers"]
    assert done.stdout.rstrip().endswith("all 9 checks passed")


def test_a_broken_cluster_fails_each_line_with_what_to_do(cluster: Cluster, tmp_path: Path) -> None:
    # Given a database that does not exist, a broker port nobody listens on, a GitHub refusing
    # the token, and a PATH without bubblewrap
    missing_db = cluster.env["ADE_DATABASE_URL"].rsplit("/", 1)[0] + "/ade_no_such_database"
    empty = tmp_path / "bin"
    empty.mkdir()
    with github(401, None) as api_url:
        env = {
            **cluster.env,
            "ADE_DATABASE_URL": missing_db,
            "ADE_BROKER_URL": f"redis://127.0.0.1:{free_port()}/0",
            "ADE_GITHUB__API_URL": api_url,
            "ADE_GITHUB__TOKEN": "ghp_revoked",
            "PATH": str(empty),
        }

        # When the doctor runs
        done = cli(cluster, "doctor", env=env)

    # Then it exits 1, and each broken part fails with a fix; what depends on it is skipped
    assert done.returncode == 1, done.stdout + done.stderr
    assert verdicts(done.stdout) == {
        "settings": "ok",
        "database": "fail",
        "schema": "skip",
        "broker": "fail",
        "workers": "skip",
        "beats": "skip",
        "providers": "warn",
        "github": "fail",
        "sandbox": "fail",
    }
    found = lines(done.stdout)
    assert 'database "ade_no_such_database" does not exist' in found["database"]
    assert "fix: check ADE_DATABASE_URL" in found["database"]
    assert "fix: check ADE_BROKER_URL" in found["broker"]
    assert "401" in found["github"] and "fix: create a token" in found["github"]
    assert "ghp_revoked" not in done.stdout
    assert "bubblewrap (`bwrap`) is not on PATH" in found["sandbox"]
    assert "4 of 9 checks failed: database, broker, github, sandbox" in done.stdout


def test_no_workers_no_beat_and_a_token_without_repo_scope_fail(cluster: Cluster) -> None:
    # Given a reachable database and broker, but no worker or beat, and a public_repo token
    with github(200, "public_repo, read:org") as api_url:
        env = {**cluster.env, "ADE_GITHUB__API_URL": api_url, "ADE_GITHUB__TOKEN": "ghp_narrow"}

        # When the doctor runs
        done = cli(cluster, "doctor", "--json", "--timeout", "2", env=env)

    # Then workers, beats and github fail, each saying what to start or change
    assert done.returncode == 1, done.stdout + done.stderr
    results = {item["name"]: item for item in json.loads(done.stdout)}
    assert {name for name, item in results.items() if item["verdict"] == "fail"} == {
        "workers",
        "beats",
        "github",
    }
    assert results["workers"]["detail"].startswith("no worker answered within 1 s")
    assert results["workers"]["fix"].startswith(
        "start workers: `ade-tasks worker -Q ade.builtin,ade.agent` and "
        "`ade-tasks worker -Q ade.ingress,ade.control`"
    )
    assert results["beats"]["fix"].startswith("start one: `ade-tasks beat`")
    assert (
        "lacks the scope repo (`public_repo` reaches public repositories only)"
        in (results["github"]["detail"])
    )


def test_a_broker_that_accepts_and_never_answers_is_cut_off_in_time(cluster: Cluster) -> None:
    # Given a "Redis" that accepts connections and never says a word
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    url = f"redis://127.0.0.1:{listener.getsockname()[1]}/0"
    broker = next(check for check in CHECKS if check.name == "broker")
    settings = Settings(database_url=cluster.settings.database_url, broker_url=url)

    # When the broker check runs with a 1 s bound
    started = time.monotonic()
    try:
        result = run_check(broker, Probe(settings, timeout=1.0))
    finally:
        listener.close()

    # Then it fails within about that bound instead of hanging the doctor
    assert time.monotonic() - started < 3
    assert result.verdict == Verdict.FAIL


def test_a_worker_left_on_builtin_and_control_by_an_upgrade_matches_events_with_a_warning(
    cluster: Cluster,
) -> None:
    # Given the only worker started as before ade.ingress existed
    cluster.worker(queues="ade.builtin,ade.control")
    workers = next(check for check in CHECKS if check.name == "workers")

    # When the doctor's workers check runs
    result = run_check(workers, Probe(cluster.settings, timeout=6.0))

    # Then that worker consumes ade.ingress too (no event waits for a worker), and the doctor
    # warns that runs share its pool with matching, saying how to split them
    assert result.verdict == Verdict.WARN, result
    assert "ade.ingress: 1 worker(s)" in result.detail
    assert "runs wait while matching holds its processes" in result.detail
    assert (
        "give matching a worker of its own: `ade-tasks worker -Q ade.ingress,ade.control -c 2`"
        in (result.fix)
    )
