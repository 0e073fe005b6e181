"""Tokens and roles against the real `ade-tasks api` process: every endpoint refuses a missing or
revoked token, a role too low changes nothing, and state-changing calls land in the audit log."""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from sqlalchemy import func, select, text

from ade_api.http.app import create_app
from ade_tasks.access.roles import Role
from ade_tasks.db import tokens as tokens_db
from ade_tasks.db.engine import SessionFactory, create_db_engine, create_session_factory
from ade_tasks.db.schema import ApiTokenRow, AuditRow, RulePauseRow, RunRow
from ade_tasks.rule_files.sync import sync_rules_dir
from ade_tasks.settings import Settings
from tests.conftest import write_rule
from tests.integration.conftest import Cluster, api_with_hello_rule
from tests.integration.test_cli_cluster import cli
from tests.support import free_port, wait_until

OPEN = {"/healthz", "/readyz", "/api/v1/webhooks/github", "/api/v1/webhooks/{hook_id}"}


@pytest.fixture
def api(cluster: Cluster) -> httpx.Client:
    return api_with_hello_rule(cluster)


def token(cluster: Cluster, role: Role, name: str) -> str:
    with cluster.session_factory.begin() as session:
        return tokens_db.create_token(session, name, role, "tests")[1]


def client(api: httpx.Client, secret: str | None) -> httpx.Client:
    headers = {"Authorization": f"Bearer {secret}"} if secret else {}
    return httpx.Client(base_url=api.base_url, headers=headers, timeout=10)


def runs_count(cluster: Cluster) -> int:
    with cluster.session_factory() as session:
        return int(session.scalar(select(func.count()).select_from(RunRow)) or 0)


def every_endpoint(api: httpx.Client) -> list[tuple[str, str]]:
    document = api.get("/openapi.json").json()
    calls = []
    for path, item in document["paths"].items():
        if path in OPEN:
            continue
        concrete = re.sub(r"\{[^}]+\}", "1", path)
        calls += [(method.upper(), concrete) for method in item if method != "parameters"]
    return calls


def test_every_endpoint_refuses_a_missing_or_revoked_token_and_changes_nothing(
    cluster: Cluster, api: httpx.Client
) -> None:
    revoked = token(cluster, Role.ADMIN, "gone")
    with cluster.session_factory.begin() as session:
        row = session.scalar(select(ApiTokenRow).where(ApiTokenRow.name == "gone"))
        assert row is not None
        tokens_db.revoke_token(session, row.id)
    calls = every_endpoint(api)
    assert ("POST", "/api/v1/rules/1/runs") in calls and ("GET", "/api/v1/tokens") in calls

    for secret, why in ((None, "no token was sent"), (revoked, "unknown or revoked")):
        with client(api, secret) as caller:
            for method, path in calls:
                response = caller.request(method, path, json={})
                assert response.status_code == 401, (method, path, response.text)
                assert response.headers["content-type"] == "application/problem+json"
                assert response.headers["www-authenticate"].startswith("Bearer")
                assert why in response.json()["detail"]

    assert runs_count(cluster) == 0
    assert api.get("/healthz").status_code == 200  # probes stay open


def test_a_viewer_reads_but_cannot_act_and_an_operators_calls_are_audited(
    cluster: Cluster, api: httpx.Client
) -> None:
    with client(api, token(cluster, Role.VIEWER, "watcher")) as viewer:
        assert viewer.get("/api/v1/runs").status_code == 200
        assert viewer.get("/api/v1/me").json() == {
            "name": "watcher",
            "role": "viewer",
            "automations_disabled": False,
            "notice": None,
        }
        for method, path, body in (
            ("POST", "/api/v1/rules/hello/runs", {}),
            ("POST", "/api/v1/inputs/1/answer", {"answer": "accept"}),
            ("POST", "/api/v1/tokens", {"name": "x", "role": "admin"}),
            ("GET", "/api/v1/audit", None),
        ):
            response = viewer.request(method, path, json=body)
            assert response.status_code == 403, (method, path, response.text)
            assert "token 'watcher' has viewer" in response.json()["detail"]
    assert runs_count(cluster) == 0

    with client(api, token(cluster, Role.OPERATOR, "oncall")) as operator:
        started = operator.post("/api/v1/rules/hello/runs", json={})
        assert started.status_code == 202, started.text
        assert operator.post("/api/v1/rules/trust", json={"content_hash": "x"}).status_code == 403

    entries = api.get("/api/v1/audit").json()
    mine = [(e["actor"], e["role"], e["method"], e["path"], e["status_code"]) for e in entries]
    assert ("oncall", "operator", "POST", "/api/v1/rules/hello/runs", 202) in mine
    assert not any(actor == "watcher" for actor, *_ in mine)  # refused calls reached nothing
    assert runs_count(cluster) == 1


def test_a_manual_run_records_the_requesting_tokens_name(
    cluster: Cluster, api: httpx.Client
) -> None:
    with client(api, token(cluster, Role.OPERATOR, "oncall")) as operator:
        plain = operator.post("/api/v1/rules/hello/runs", json={}).json()["run_id"]
        shared = operator.post("/api/v1/rules/hello/runs", json={"requested_by": "kim"})
        for claimed in ("", "oncall"):  # naming itself adds nothing
            same = operator.post("/api/v1/rules/hello/runs", json={"requested_by": claimed})
            assert (
                api.get(f"/api/v1/runs/{same.json()['run_id']}").json()["trigger"]["requested_by"]
                == "oncall"
            )
        runs = {r["id"]: r for r in operator.get("/api/v1/runs").json()["items"]}
    assert runs[plain]["trigger"]["requested_by"] == "oncall"
    assert runs[plain]["trigger_summary"] == "manual run by oncall"
    assert runs[shared.json()["run_id"]]["trigger"]["requested_by"] == "oncall (kim)"
    # From the CLI with that token, and in its runs list
    env = {**cluster.env, "ADE_API_TOKEN": token(cluster, Role.OPERATOR, "pager")}
    ran = cli(cluster, "run", "hello", "--url", str(api.base_url), env=env)
    assert ran.returncode == 0, ran.stderr
    listed = cli(cluster, "runs", "list", "--url", str(api.base_url), env=env).stdout
    assert "manual by pager" in listed and "manual by oncall (kim)" in listed


def test_admins_create_and_revoke_tokens_through_the_api_and_the_cli(
    cluster: Cluster, api: httpx.Client
) -> None:
    created = api.post("/api/v1/tokens", json={"name": "robot", "role": "operator"})
    assert created.status_code == 201, created.text
    secret = created.json()["token"]
    with client(api, secret) as robot:
        me = robot.get("/api/v1/me").json()
        assert (me["name"], me["role"]) == ("robot", "operator")
        listed = api.get("/api/v1/tokens").json()
        assert secret not in json.dumps(listed)
        revoked = api.delete(f"/api/v1/tokens/{created.json()['id']}")
        assert revoked.status_code == 200 and revoked.json()["revoked_at"]
        assert robot.get("/api/v1/runs").status_code == 401
    assert api.delete(f"/api/v1/tokens/{created.json()['id']}").status_code == 409

    made = cli(cluster, "tokens", "create", "--name", "ci-bot", "--role", "viewer", "--json")
    assert made.returncode == 0, made.stderr
    cli_secret = json.loads(made.stdout)["token"]
    with client(api, cli_secret) as ci_bot:
        assert ci_bot.get("/api/v1/me").json()["role"] == "viewer"
    listing = cli(cluster, "tokens", "list")
    assert "ci-bot" in listing.stdout and cli_secret not in listing.stdout

    env = {k: v for k, v in cluster.env.items() if k != "ADE_API_TOKEN"}
    anonymous = cli(cluster, "runs", "list", "--url", str(api.base_url), env=env)
    assert anonymous.returncode != 0
    assert "401" in anonymous.stderr and "ADE_API_TOKEN" in anonymous.stderr


@contextlib.contextmanager
def served(app: Any) -> Iterator[str]:
    """The app served by uvicorn on a free loopback port; yields its base URL."""
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=free_port(),
                                           log_level="warning"))  # fmt: skip
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_until(lambda: server.started, 15, "uvicorn to serve the app")
        yield f"http://127.0.0.1:{server.config.port}"
    finally:
        server.should_exit = True
        thread.join(timeout=15)


def operator_with_rule(sessions: SessionFactory, rules: Path) -> str:
    """An operator's token, with the rule `nightly` synced from `rules`."""
    with sessions.begin() as session:
        secret = tokens_db.create_token(session, "olivia", Role.OPERATOR, "tests")[1]
    write_rule(rules, "nightly.yaml", """
        id: nightly
        triggers: [{type: schedule, cron: "0 3 * * *"}]
        execution: {kind: built-in, actions: [{type: run-command, command: "echo hi"}]}
        """)  # fmt: skip
    assert not sync_rules_dir(sessions, rules)[0].problems
    return secret


def audited_calls(sessions: SessionFactory) -> list[tuple[Any, ...]]:
    with sessions() as session:
        audit = session.execute(select(AuditRow.actor, AuditRow.method, AuditRow.path,
                                       AuditRow.status_code)).all()  # fmt: skip
    return [tuple(row) for row in audit]


@pytest.mark.parametrize(
    ("path", "form", "status"),
    [
        # an API call answered with a body
        ("/api/v1/rules/no-such-rule/runs", None, 404),
        # a web form's post answered by an empty 303, complete as soon as its headers are out
        ("/ui/rules/nightly/pause", {"trigger_index": "", "note": "db move"}, 303),
    ],
)
def test_a_call_is_in_the_audit_log_by_the_time_its_response_arrives(
    database_url: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    path: str,
    form: dict[str, str] | None,
    status: int,
) -> None:
    # Given the real app served by uvicorn, whose audit writes take a while (a busy database)
    engine = create_db_engine(database_url)
    sessions = create_session_factory(engine)
    secret = operator_with_rule(sessions, tmp_path)
    slow_record = tokens_db.record_call

    def record_call(*args: Any, **kwargs: Any) -> None:
        time.sleep(0.5)
        slow_record(*args, **kwargs)

    monkeypatch.setattr(tokens_db, "record_call", record_call)
    app = create_app(Settings(database_url=database_url), session_factory=sessions)
    try:
        with served(app) as base:
            headers = {"Authorization": f"Bearer {secret}"}
            # When an operator's state-changing call has its answer
            answer = httpx.post(f"{base}{path}", headers=headers, data=form, timeout=10)
            assert answer.status_code == status, answer.text
            # Then the audit log holds it already
            assert audited_calls(sessions) == [("olivia", "POST", path, status)]
    finally:
        engine.dispose()


def test_a_call_the_database_failed_is_audited_with_the_503_its_caller_got(
    database_url: str, tmp_path: Path
) -> None:
    # Given the real app whose connections give up on a lock after 0.3 s, and the table of
    # pauses locked by someone else (a migration, a long transaction)
    engine = create_db_engine(
        database_url, connect_args={"connect_timeout": 5, "options": "-c lock_timeout=300"}
    )
    sessions = create_session_factory(engine)
    secret = operator_with_rule(sessions, tmp_path)
    app = create_app(Settings(database_url=database_url), session_factory=sessions)
    locker = create_db_engine(database_url)
    path = "/api/v1/rules/nightly/pause"
    try:
        with served(app) as base, locker.connect() as holder:
            holder.execute(text("LOCK TABLE rule_pauses IN ACCESS EXCLUSIVE MODE"))
            # When an operator pauses the rule
            answer = httpx.post(
                f"{base}{path}", headers={"Authorization": f"Bearer {secret}"},
                json={"note": "db move"}, timeout=10,
            )  # fmt: skip
            holder.rollback()
            # Then the caller is told the database failed, and the audit log says the same
            assert answer.status_code == 503, answer.text
            assert answer.headers["retry-after"]
            assert audited_calls(sessions) == [("olivia", "POST", path, 503)]
            with sessions() as session:
                assert session.scalar(select(func.count()).select_from(RulePauseRow)) == 0
    finally:
        locker.dispose()
        engine.dispose()


def test_a_gate_needing_two_approvals_refuses_the_requester_and_counts_tokens_once(
    cluster: Cluster, api: httpx.Client
) -> None:
    write_rule(cluster.tmp / "rules", "two-keys.yaml", """
        id: two-keys
        triggers: [{type: manual}]
        guardrails: {require_human: {approvals: 2}}
        execution: {kind: built-in, actions: [{type: run-command, command: "echo released"}]}
        """)  # fmt: skip
    cluster.sync_rules(cluster.tmp / "rules")
    cluster.worker(queues="ade.builtin")
    secrets = {name: token(cluster, Role.OPERATOR, name) for name in ("oncall", "alice", "bob")}
    people = {name: client(api, secret) for name, secret in secrets.items()}

    def waiting_run() -> str:
        run_id = str(people["oncall"].post("/api/v1/rules/two-keys/runs", json={}).json()["run_id"])
        wait_until(lambda: run_status(api, run_id) == "waiting", 30, "the run to park at its gate")
        return run_id

    run_id = waiting_run()
    refused = people["oncall"].post(f"/api/v1/runs/{run_id}/approve", json={"by": "kim"})
    assert refused.status_code == 403, refused.text
    assert "requested by token 'oncall'" in refused.json()["detail"]
    assert "requester_may_approve: true" in refused.json()["detail"]

    env = {**cluster.env, "ADE_API_TOKEN": secrets["alice"]}
    approved = cli(cluster, "runs", "approve", run_id, "--url", str(api.base_url), env=env)
    assert approved.returncode == 0, approved.stderr
    assert "waiting" in approved.stdout and "1 of 2 approvals: alice" in approved.stdout
    again = people["alice"].post(f"/api/v1/runs/{run_id}/approve", json={"by": "al"})
    assert again.json()["status"] == "waiting"  # the same token counts once
    (gate,) = api.get(f"/api/v1/runs/{run_id}").json()["approvals"]
    assert (gate["approvals_needed"], gate["excluded_approver"]) == (2, "oncall")
    assert [vote["by"] for vote in gate["votes"]] == ["alice"]

    released = people["bob"].post(f"/api/v1/runs/{run_id}/approve", json={"note": "ok"})
    assert released.json()["status"] == "queued", released.text
    wait_until(lambda: run_status(api, run_id) == "succeeded", 30, "the released run to finish")
    events = api.get(f"/api/v1/runs/{run_id}/events").json()
    answers = [e["data"] for e in events if e["kind"] == "approval.answered"]
    assert [(a["by"], a["approvals"], a["needed"]) for a in answers] == [
        ("alice", 1, 2),
        ("bob", 2, 2),
    ]
    audit = [(e["actor"], e["path"], e["status_code"]) for e in api.get("/api/v1/audit").json()]
    approve = f"/api/v1/runs/{run_id}/approve"
    assert {("alice", approve, 200), ("bob", approve, 200)} <= set(audit)

    declined = waiting_run()  # a decline by anyone, the requester too, ends the gate
    people["oncall"].post(f"/api/v1/runs/{declined}/reject", json={"note": "wrong input"})
    assert run_status(api, declined) == "cancelled"
    for person in people.values():
        person.close()


def run_status(api: httpx.Client, run_id: str) -> str:
    return str(api.get(f"/api/v1/runs/{run_id}").json()["status"])
