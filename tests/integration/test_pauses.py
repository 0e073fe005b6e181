"""Pause and the kill switch on a real cluster: PostgreSQL, Redis, a real `celery worker` and a
real `ade-tasks api` process. A pause set (through the API, by an operator) while a scheduled
run is running lets that run finish and records the next slot skipped with the note; the kill
switch refuses manual runs unless an admin forces one and shows in /readyz and /api/v1/me."""

from __future__ import annotations

import httpx
from sqlalchemy import select

from ade_tasks.access.roles import Role
from ade_tasks.db import tokens as tokens_db
from ade_tasks.db.schema import RunRow, ScheduleOccurrenceRow
from ade_tasks.schedule.scheduler import Scheduler
from tests.conftest import write_rule
from tests.integration.conftest import Cluster, api_with_hello_rule
from tests.scheduler_support import FakeClock
from tests.support import wait_until


def token(cluster: Cluster, name: str, role: Role) -> str:
    with cluster.session_factory.begin() as session:
        _, secret = tokens_db.create_token(session, name, role, "tests")
    return secret


def test_pausing_during_a_running_run_lets_it_finish_and_skips_the_next_slot_with_the_note(
    cluster: Cluster,
) -> None:
    write_rule(cluster.tmp / "rules", "slow.yaml", """
        id: slow
        triggers: [{type: schedule, cron: "* * * * *"}]
        guardrails: {overlap: allow-all}
        execution: {kind: built-in, actions: [{type: run-command, command: "sleep 3; echo done"}]}
        """)  # fmt: skip
    cluster.sync_rules(cluster.tmp / "rules")
    cluster.worker()
    api = cluster.api()
    operator = {"Authorization": f"Bearer {token(cluster, 'oncall', Role.OPERATOR)}"}
    clock = FakeClock()
    beat = Scheduler(cluster.session_factory, cluster.sender(), "beat", clock=clock)
    beat.tick()
    clock.advance(60)
    (run_id,) = beat.tick().fired.values()

    def status() -> str | None:
        with cluster.session_factory() as session:
            return session.scalar(select(RunRow.status).where(RunRow.id == run_id))

    wait_until(lambda: status() == "running", 30, "the scheduled run to start")
    paused = api.post(
        "/api/v1/rules/slow/pause", json={"note": "deploy freeze", "by": "ana"}, headers=operator
    )
    assert paused.status_code == 200, paused.text
    assert paused.json()["paused_by"] == "oncall (ana)"

    wait_until(lambda: status() == "succeeded", 30, "the running run to finish")
    clock.advance(60)
    report = beat.tick()

    assert not report.fired
    with cluster.session_factory() as session:
        rows = session.scalars(select(ScheduleOccurrenceRow).order_by("slot")).all()
        outcomes = [(row.outcome, row.run_id, row.reason) for row in rows]
    assert outcomes[0] == ("fired", run_id, None)
    outcome, skipped_run, reason = outcomes[1]
    assert (outcome, skipped_run) == ("skipped", None)
    assert reason is not None and "rule 'slow' is paused by oncall (ana)" in reason
    assert "deploy freeze; resume with `ade-tasks rules resume slow`" in reason
    audit = [(e["actor"], e["path"]) for e in api.get("/api/v1/audit").json()]
    assert ("oncall", "/api/v1/rules/slow/pause") in audit

    resumed = api.post("/api/v1/rules/slow/resume", json={}, headers=operator)
    assert resumed.status_code == 200 and resumed.json()["note"] == "deploy freeze"
    assert resumed.json()["message"] == "rule 'slow' resumed by oncall; its next slot fires again"
    clock.advance(60)
    assert len(beat.tick().fired) == 1


def test_a_bad_pause_request_is_refused_with_the_field(cluster: Cluster) -> None:
    api = api_with_hello_rule(cluster)

    no_note = api.post("/api/v1/rules/hello/pause", json={"note": ""})
    manual = api.post("/api/v1/rules/hello/pause", json={"note": "x", "trigger_index": 0})
    unknown = api.post("/api/v1/rules/ghost/pause", json={"note": "x"})
    not_paused = api.post("/api/v1/rules/hello/resume")

    assert no_note.status_code == 422 and "note: is empty" in no_note.json()["detail"]
    assert manual.status_code == 422 and "manual runs are never paused" in manual.text
    assert unknown.status_code == 404 and "'ghost' does not exist" in unknown.text
    assert not_paused.status_code == 404
    assert not_paused.json()["detail"] == (
        "rule 'hello' is not paused, so there is nothing to resume"
    )


def test_the_kill_switch_refuses_manual_runs_unless_an_admin_forces_and_is_reported(
    cluster: Cluster,
) -> None:
    write_rule(cluster.tmp / "rules", "hello.yaml", """
        id: hello
        triggers: [{type: manual}]
        execution: {kind: built-in, actions: [{type: run-command, command: "echo hi"}]}
        """)  # fmt: skip
    cluster.sync_rules(cluster.tmp / "rules")
    api = cluster.api(env={"ADE_DISABLE_AUTOMATIONS": "1"})
    operator = {"Authorization": f"Bearer {token(cluster, 'oncall', Role.OPERATOR)}"}

    ready = httpx.get(f"{api.base_url}/readyz").json()
    me = api.get("/api/v1/me").json()
    refused = api.post("/api/v1/rules/hello/runs", json={})
    not_admin = api.post("/api/v1/rules/hello/runs", json={"force": True}, headers=operator)
    forced = api.post("/api/v1/rules/hello/runs", json={"force": True, "requested_by": "bo"})

    assert ready["automations"] == "disabled"
    assert me["automations_disabled"] is True and "ADE_DISABLE_AUTOMATIONS=1" in me["notice"]
    assert refused.status_code == 409
    assert "automations are disabled on this cluster (ADE_DISABLE_AUTOMATIONS=1)" in refused.text
    assert not_admin.status_code == 403 and "only an admin token may force" in not_admin.text
    assert forced.status_code == 202, forced.text
    with cluster.session_factory() as session:
        (trigger,) = session.scalars(select(RunRow.trigger)).all()
    assert trigger["forced_by"] == "tests (bo)"
