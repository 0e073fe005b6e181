"""Cluster notifications end to end (issue 37, finding 4): a run failing on a real celery worker
(PostgreSQL, Redis) is mailed to a local SMTP server (aiosmtpd) and posted as JSON to a local
HTTP receiver, through Apprise, by the worker's housekeeping; a route that is down and one that
hangs are retried and logged, hold up neither the others nor the run, and never change it."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from email import message_from_string
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from aiosmtpd.controller import Controller

from ade_tasks.db import notifications as outbox
from ade_tasks.db.schema import RunRow
from ade_tasks.runs.dispatch import dispatch
from ade_tasks.runs.trigger_events import TriggerEvent
from tests.conftest import write_rule
from tests.integration.conftest import Cluster
from tests.support import free_port, wait_until


class Mailbox:
    """aiosmtpd's handler: keeps every message it is given."""

    def __init__(self) -> None:
        self.messages: list[Any] = []

    async def handle_DATA(self, _server: object, _session: object, envelope: Any) -> str:
        self.messages.append(message_from_string(envelope.content.decode()))
        return "250 OK"


@pytest.fixture
def mailbox() -> Iterator[tuple[Mailbox, int]]:
    box, port = Mailbox(), free_port()
    controller = Controller(box, hostname="127.0.0.1", port=port)
    controller.start()
    yield box, port
    controller.stop()


@pytest.fixture
def receiver() -> Iterator[tuple[list[dict[str, Any]], int]]:
    """A local HTTP receiver keeping each JSON body POSTed to it."""
    posts: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            posts.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *_args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield posts, server.server_address[1]
    server.shutdown()
    server.server_close()


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections and never answers (a hung webhook)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    yield listener.getsockname()[1]
    listener.close()


def test_a_failed_run_is_mailed_and_posted_and_a_dead_or_hung_route_changes_nothing(
    cluster: Cluster,
    mailbox: tuple[Mailbox, int],
    receiver: tuple[list[dict[str, Any]], int],
    silent_port: int,
) -> None:
    # Given four routes: mail (a local SMTP server), hook (a local JSON receiver), down (no
    # server) and hung (accepts, never answers; Apprise's read timeout cut to 2 s)
    box, smtp_port = mailbox
    posts, http_port = receiver
    routes = {
        "mail": {"url": f"mailto://127.0.0.1:{smtp_port}?from=ade@example.org&to=ops@example.org"},
        "hook": {"url": f"json://127.0.0.1:{http_port}/ade", "events": ["run.failed"]},
        "down": {"url": f"json://127.0.0.1:{free_port()}/"},
        "hung": {"url": f"json://127.0.0.1:{silent_port}/?rto=2&cto=2"},
    }
    env = {
        "ADE_NOTIFICATIONS__ROUTES": json.dumps(routes),
        "ADE_NOTIFICATIONS__SWEEP_SECONDS": "1",
        "ADE_NOTIFICATIONS__RETRY_SECONDS": "1",
        "ADE_NOTIFICATIONS__ATTEMPTS": "1",
        "ADE_API_URL": "http://ade.example",
    }
    write_rule(cluster.tmp / "rules", "breaks.yaml", """
        id: breaks
        triggers: [{type: manual}]
        execution: {kind: built-in, actions: [{id: tests, type: run-command, command: "exit 3"}]}
        """)  # fmt: skip
    cluster.sync_rules(cluster.tmp / "rules")
    worker = cluster.worker(env=env)

    # When a run of it fails on the worker
    event = TriggerEvent.manual()
    run_id_str = dispatch(cluster.session_factory, cluster.sender(), "breaks", event).run.id

    def run() -> RunRow:
        with cluster.session_factory() as session:
            row = session.get(RunRow, run_id_str)
            assert row is not None
            return row

    wait_until(lambda: run().status == "failed", 30, f"run {run_id_str} to fail")
    failed_as = (run().error, run().finished_at)
    assert failed_as[0] == "step 'tests' (#1) failed: command exited with status 3"

    # Then the mail and the JSON post arrive, while the hung route still hangs
    wait_until(lambda: box.messages and posts, 30, "the mail and the JSON post")
    (mail,) = box.messages
    assert mail["Subject"] == "ADE: rule breaks: run failed"
    assert mail["To"] == "ops@example.org"
    text = mail.get_payload(decode=True).decode()
    assert f"Run {run_id_str} of rule breaks failed." in text
    assert f"Error: {failed_as[0]}" in text
    assert f"http://ade.example/ui/runs/{run_id_str}" in text
    (post,) = posts
    assert post["title"] == "ADE: rule breaks: run failed"
    assert f"Run {run_id_str} of rule breaks failed." in post["message"]

    # And the dead and hung routes are tried twice (attempts=1), logged, then given up
    def settled() -> dict[str, tuple[str, int, str | None]]:
        with cluster.session_factory() as session:
            rows = outbox.list_notifications(session, f"run.failed:{run_id_str}")
            states = {row.route: (row.status, row.attempts, row.error) for row in rows}
        return states if all(s != "pending" for s, _, _ in states.values()) else {}

    states = wait_until(settled, 60, "every route's notification to settle")
    assert {route: state[:2] for route, state in states.items()} == {
        "mail": ("sent", 1),
        "hook": ("sent", 1),
        "down": ("failed", 2),
        "hung": ("failed", 2),
    }
    down_error, hung_error = states["down"][2] or "", states["hung"][2] or ""
    assert down_error.startswith("route 'down': A Connection error occurred sending JSON")
    assert down_error.endswith("(failed after 0.0 s)")
    assert hung_error.endswith("(failed after 2.0 s)")  # its read timeout, not forever
    log = worker.output()
    for route in ("down", "hung"):
        assert f"to route '{route}' failed (attempt 1 of 2)" in log
        assert f"to route '{route}' failed (attempt 2 of 2)" in log and "giving up" in log
    assert "json://" not in log and "mailto://" not in log  # a route's URL is a credential

    # And the run is exactly as its step left it; nothing was sent twice
    final = run()
    assert (final.status, (final.error, final.finished_at)) == ("failed", failed_as)
    assert len(box.messages) == 1 and len(posts) == 1
