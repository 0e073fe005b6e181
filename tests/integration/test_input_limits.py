"""Deep or huge input against a real `ade-tasks api` process (PostgreSQL, Redis): rule writes,
manual runs and GitHub deliveries nested thousands of levels deep or megabytes large are
refused with 4xx problem+json and store nothing; a rules directory with such a file still
syncs the others and the API still starts; connections that never finish their request
headers are closed by the server within its bound (real sockets on loopback)."""

from __future__ import annotations

import json
import selectors
import socket
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select

from ade_api.http.body_limits import MANUAL_RUN_BODY_BYTES
from ade_api.http.header_timeout import HEADER_TIMEOUT_SECONDS
from ade_tasks.db.schema import IngressEventRow, RuleRow, RunRow
from tests.conftest import write_rule
from tests.integration.conftest import Cluster, api_with_hello_rule
from tests.integration.test_cli_cluster import cli
from tests.integration.test_webhooks import SECRET, deliver
from tests.support import BIN, Child, free_port, wait_until

PROBLEM = "application/problem+json"
GOOD = """
    id: good
    triggers: [{type: manual}]
    execution: {kind: built-in, actions: [{type: run-command, command: "true"}]}
"""
RULE: dict[str, Any] = {
    "id": "limits",
    "triggers": [{"type": "manual"}],
    "execution": {"kind": "built-in", "actions": [{"type": "run-command", "command": "true"}]},
}


def deep_list(depth: int) -> str:
    return "[" * depth + "]" * depth


def problem(response: httpx.Response, *statuses: int) -> dict[str, Any]:
    assert response.status_code in statuses, (response.status_code, response.text[:500])
    assert response.headers["content-type"] == PROBLEM
    body: dict[str, Any] = response.json()
    assert body["status"] == response.status_code
    return body


def count(cluster: Cluster, column: Any) -> int:
    with cluster.session_factory() as session:
        return int(session.scalar(select(func.count(column))) or 0)


@pytest.fixture
def api(cluster: Cluster) -> Iterator[httpx.Client]:
    client = api_with_hello_rule(cluster)
    yield client
    client.close()


# --- rule writes ---------------------------------------------------------------------------


def test_rule_writes_too_deep_or_out_of_range_are_refused_and_store_nothing(
    cluster: Cluster, api: httpx.Client
) -> None:
    rules_before = count(cluster, RuleRow.id)

    deep_yaml = problem(api.post("/api/v1/rules", json={"yaml": deep_list(3000)}), 422)
    assert "nested deeper than 64 levels" in deep_yaml["detail"]
    assert deep_yaml["errors"][0]["field"].startswith("line 1, column")

    deep_document = {**RULE, "description": json.loads(deep_list(900))}  # parses, too deep
    for body in (
        '{"document": ' + deep_list(3000) + "}",  # Python's JSON parser alone would recurse
        json.dumps({"document": deep_document}),
    ):
        sent = api.post("/api/v1/rules", content=body, headers={"content-type": "application/json"})
        assert "nested deeper than 64 levels" in problem(sent, 400)["detail"]

    actions = [{"type": "run-command", "command": "true", "timeout_sec": 1e300}]
    huge = {**RULE, "execution": {"kind": "built-in", "actions": actions}}
    refused = problem(api.post("/api/v1/rules", json={"document": huge}), 422)
    assert [e["field"] for e in refused["errors"]] == ["execution.actions.0.timeout_sec"]
    assert "366 days" in refused["detail"]

    never = {**RULE, "triggers": [{"type": "schedule", "cron": "0 0 30 2 *"}]}
    refused = problem(api.post("/api/v1/rules", json={"document": never}), 422)
    assert [e["field"] for e in refused["errors"]] == ["triggers.0.cron"]
    assert "never fires" in refused["detail"]

    too_big = problem(api.post("/api/v1/rules", json={"yaml": "#" * (3 * 1024 * 1024)}), 413)
    assert "nothing was stored" in too_big["detail"]
    assert count(cluster, RuleRow.id) == rules_before
    assert api.post("/api/v1/rules", json={"document": RULE}).status_code == 201  # still works


# --- manual runs ---------------------------------------------------------------------------


def test_a_50_mb_manual_run_is_refused_with_413_and_nothing_is_stored(
    cluster: Cluster, api: httpx.Client
) -> None:
    huge = json.dumps({"inputs": {"blob": "a" * (50 * 1024 * 1024)}}).encode()
    declared = api.post(
        "/api/v1/rules/hello/runs",
        content=huge,
        headers={"content-type": "application/json"},
        timeout=60,
    )
    assert "at most 65,536 bytes" in problem(declared, 413)["detail"]

    def chunks() -> Iterator[bytes]:  # chunked: no Content-Length to go by
        body = json.dumps({"inputs": {"blob": "a" * (MANUAL_RUN_BODY_BYTES + 1)}}).encode()
        for start in range(0, len(body), 8192):
            yield body[start : start + 8192]

    chunked = api.post(
        "/api/v1/rules/hello/runs", content=chunks(), headers={"content-type": "application/json"}
    )
    assert "nothing was stored" in problem(chunked, 413)["detail"]
    form = api.post(
        "/ui/rules/hello/runs",
        content=b"extra=" + b"a" * (MANUAL_RUN_BODY_BYTES + 1),
        headers={"content-type": "application/x-www-form-urlencoded"},
    )
    problem(form, 413)
    deep = api.post(
        "/api/v1/rules/hello/runs",
        content='{"inputs": {"x": ' + deep_list(500) + "}}",
        headers={"content-type": "application/json"},
    )
    problem(deep, 400)
    assert count(cluster, RunRow.id) == 0

    small = api.post("/api/v1/rules/hello/runs", json={"inputs": {"who": "w" * 1000}})
    assert small.status_code == 202, small.text
    assert count(cluster, RunRow.id) == 1


# --- webhook bodies ------------------------------------------------------------------------


def test_a_signed_5000_deep_github_body_is_refused_with_400(cluster: Cluster) -> None:
    api = cluster.api(env={"ADE_GITHUB__WEBHOOK_SECRET": SECRET})
    body = ('{"action": "opened", "x": ' + deep_list(5000) + "}").encode()
    answer = deliver(api, "pull_request", body)
    assert "nested deeper than 64 levels" in problem(answer, 400)["detail"]
    assert api.get("/healthz").status_code == 200
    with cluster.session_factory() as session:
        (row,) = session.scalars(select(IngressEventRow)).all()
    assert row.status == "failed" and row.payload == {}


# --- rules files ---------------------------------------------------------------------------


def test_rules_sync_and_api_start_up_report_a_deep_file_and_load_the_others(
    cluster: Cluster,
) -> None:
    rules_dir = cluster.tmp / "rules"
    write_rule(rules_dir, "good.yaml", GOOD)
    (rules_dir / "deep.yaml").write_text(deep_list(3000))

    synced = cli(cluster, "rules", "sync", str(rules_dir))
    assert synced.returncode == 1, synced.stderr
    output = synced.stdout + synced.stderr
    assert "deep.yaml:" in output and "nested deeper than 64 levels" in output
    assert "Traceback" not in output
    with cluster.session_factory() as session:
        assert session.scalars(select(RuleRow.id)).all() == ["good"]

    write_rule(rules_dir, "later.yaml", GOOD.replace("id: good", "id: later"))
    port = free_port()
    env = {**cluster.env, "ADE_RULES_DIR": str(rules_dir)}
    argv = [str(BIN / "ade-tasks"), "api", "--port", str(port)]  # syncs at start-up
    child = Child(argv, env, cluster.tmp / "api-sync.log", cluster.tmp)
    cluster.children.append(child)
    wait_until(lambda: _healthy(port), 30, f"the API to start ({child.log})")
    assert "deep.yaml" in child.output() and "nested deeper" in child.output()
    with cluster.session_factory() as session:
        assert sorted(session.scalars(select(RuleRow.id))) == ["good", "later"]


def _healthy(port: int) -> bool:
    return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200


# --- connections that never finish their headers -------------------------------------------


def _partial_connections(port: int, count: int) -> list[socket.socket]:
    """`count` loopback connections that each send part of a request head and stop."""
    sockets = []
    for n in range(count):
        sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + str(n).encode())
        sock.setblocking(False)
        sockets.append(sock)
    return sockets


def _wait_closed(sockets: list[socket.socket], timeout: float) -> dict[socket.socket, bytes]:
    """Read every socket until the server closes it; what each received (deadline-bounded)."""
    received = dict.fromkeys(sockets, b"")
    open_ = set(sockets)
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as selector:
        for sock in sockets:
            selector.register(sock, selectors.EVENT_READ)
        while open_ and time.monotonic() < deadline:
            for key, _ in selector.select(timeout=max(0.0, deadline - time.monotonic())):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                try:
                    data = sock.recv(4096)
                except ConnectionResetError:
                    data = b""
                if data:
                    received[sock] += data
                    continue
                selector.unregister(sock)
                open_.discard(sock)
    assert not open_, f"{len(open_)} of {len(sockets)} connections still open after {timeout} s"
    return received


def _check_header_timeout(port: int, count: int) -> None:
    started = time.monotonic()
    sockets = _partial_connections(port, count)
    try:
        # Still served meanwhile: a complete request on a fresh connection is answered.
        assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).status_code == 200
        received = _wait_closed(sockets, HEADER_TIMEOUT_SECONDS + 10)
    finally:
        for sock in sockets:
            sock.close()
    elapsed = time.monotonic() - started
    assert elapsed >= HEADER_TIMEOUT_SECONDS - 1, f"closed after {elapsed:.1f} s: too early"
    assert all(data.startswith(b"HTTP/1.1 408 ") for data in received.values())


def test_connections_that_never_finish_their_headers_are_closed(
    cluster: Cluster, api: httpx.Client
) -> None:
    port = api.base_url.port
    assert port is not None
    _check_header_timeout(port, 200)
    # A connection that sends its head in time, slowly, is answered, and kept alive.
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        for part in (b"GET /healthz HTTP/1.1\r\n", b"Host: 127.0.0.1\r\n", b"\r\n"):
            sock.sendall(part)
            time.sleep(0.5)
        assert sock.recv(4096).startswith(b"HTTP/1.1 200 ")


def test_every_api_process_closes_connections_that_never_finish_their_headers(
    cluster: Cluster,
) -> None:
    port = free_port()
    argv = [str(BIN / "ade-tasks"), "api", "--workers", "2", "--port", str(port), "--no-sync-rules"]
    child = Child(argv, cluster.env, cluster.tmp / f"api-{uuid.uuid4().hex[:6]}.log", cluster.tmp)
    cluster.children.append(child)
    wait_until(lambda: _healthy(port), 30, f"the API processes ({child.log})")
    _check_header_timeout(port, 40)
