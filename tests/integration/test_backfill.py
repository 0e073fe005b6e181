"""Backfill on a real cluster: PostgreSQL, Redis, real `celery worker`, `ade-tasks beat` and
`ade-tasks api` processes, driven through the HTTP API with httpx and through the real CLI.

Each missing slot fires once (and a second backfill fires none), two concurrent backfills fire
each slot once, a beat firing the same slots during a backfill never double-fires one, the
overlap policy `skip` is applied and explained, and refusals name the field."""

from __future__ import annotations

import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import Any

import httpx
from sqlalchemy import select

from ade_tasks.access.roles import Role
from ade_tasks.clock import utcnow
from ade_tasks.db import occurrences as occ_db
from ade_tasks.db import rule_edits as rule_edits_db
from ade_tasks.db import tokens as tokens_db
from ade_tasks.db.occurrences import OccurrenceKey
from ade_tasks.db.schema import RunRow, ScheduleOccurrenceRow
from ade_tasks.states import OccurrenceOutcome
from tests.conftest import write_rule
from tests.integration.conftest import Cluster
from tests.support import BIN, wait_until

RULE = """
id: {id}
triggers: [{{type: schedule, cron: "{cron}"}}, {{type: manual}}]
guardrails: {{overlap: {overlap}}}
execution: {{kind: built-in, actions: [{{type: run-command, command: "{command}"}}]}}
"""


def add_schedule_rule(
    cluster: Cluster, rule_id: str, cron: str, overlap: str = "allow-all", command: str = "true"
) -> None:
    text = RULE.format(id=rule_id, cron=cron, overlap=overlap, command=command)
    write_rule(cluster.tmp / "rules", f"{rule_id}.yaml", text)
    cluster.sync_rules(cluster.tmp / "rules")


def bearer(cluster: Cluster, name: str, role: Role) -> dict[str, str]:
    with cluster.session_factory.begin() as session:
        _, secret = tokens_db.create_token(session, name, role, "tests")
    return {"Authorization": f"Bearer {secret}"}


def floor(moment: datetime, minutes: int) -> datetime:
    moment = moment.replace(second=0, microsecond=0)
    return moment - timedelta(minutes=moment.minute % minutes)


def post_backfill(
    api: httpx.Client,
    rule_id: str,
    start: datetime,
    end: datetime,
    headers: dict[str, str] | None = None,
    **extra: Any,
) -> httpx.Response:
    body = {"from": start.isoformat(), "to": end.isoformat(), **extra}
    return api.post(f"/api/v1/rules/{rule_id}/backfill", json=body, headers=headers, timeout=60)


def runs_by_slot(cluster: Cluster, rule_id: str) -> dict[str, list[str]]:
    with cluster.session_factory() as session:
        rows = session.execute(
            select(RunRow.id, RunRow.trigger).where(RunRow.rule_id == rule_id)
        ).all()
    found: dict[str, list[str]] = {}
    for run_id, trigger in rows:
        found.setdefault(trigger["slot"], []).append(run_id)
    return found


def statuses(cluster: Cluster, rule_id: str) -> list[str]:
    with cluster.session_factory() as session:
        return list(session.scalars(select(RunRow.status).where(RunRow.rule_id == rule_id)))


def test_a_backfill_fires_each_missing_slot_once_and_a_second_one_fires_none(
    cluster: Cluster,
) -> None:
    add_schedule_rule(cluster, "tenly", "*/10 * * * *")
    cluster.worker()
    api = cluster.api()
    operator = bearer(cluster, "oncall", Role.OPERATOR)
    end = floor(utcnow(), 10)
    start = end - timedelta(minutes=60)
    slots = [start + timedelta(minutes=10 * n) for n in range(6)]
    with cluster.session_factory.begin() as session:  # what the beats left behind
        missed = OccurrenceKey("tenly", 0, "*/10 * * * *", slots[1])
        paused = OccurrenceKey("tenly", 0, "*/10 * * * *", slots[3])
        occ_db.claim(session, [missed], "beat-a", OccurrenceOutcome.MISSED)
        occ_db.claim(session, [paused], "beat-a", OccurrenceOutcome.SKIPPED)
        occ_db.record_outcomes(
            session, [occ_db.Outcome(paused, OccurrenceOutcome.SKIPPED, None, "paused: freeze")]
        )

    first = post_backfill(api, "tenly", start, end, by="ana", headers=operator)

    assert first.status_code == 200, first.text
    answer = first.json()
    assert datetime.fromisoformat(answer["from"]) == start
    assert [s["result"] for s in answer["slots"]] == [
        "fired",
        "fired",
        "fired",
        "already-skipped",
        "fired",
        "fired",
    ]
    assert answer["slots"][1]["was"] == "missed" and answer["slots"][0]["was"] is None
    assert "paused: freeze" in answer["slots"][3]["detail"]
    assert answer["counts"] == {"fired": 5, "already-skipped": 1}
    assert answer["summary"].endswith("6 slot(s): 5 fired, 1 already-skipped")
    wait_until(lambda: statuses(cluster, "tenly") == ["succeeded"] * 5, 60, "the 5 backfilled runs")

    second = post_backfill(api, "tenly", start, end, headers=operator)

    assert second.status_code == 200, second.text
    results = [s["result"] for s in second.json()["slots"]]
    assert results == ["already-fired"] * 3 + ["already-skipped"] + ["already-fired"] * 2
    by_slot = runs_by_slot(cluster, "tenly")
    assert sorted(by_slot) == sorted(s.isoformat() for i, s in enumerate(slots) if i != 3)
    assert all(len(ids) == 1 for ids in by_slot.values())
    fired = {s["slot"]: s["run_id"] for s in answer["slots"] if s["result"] == "fired"}
    assert {s["slot"]: s["run_id"] for s in second.json()["slots"] if s["run_id"]} == fired
    with cluster.session_factory() as session:
        claimed_by = set(
            session.scalars(
                select(ScheduleOccurrenceRow.claimed_by).where(
                    ScheduleOccurrenceRow.rule_id == "tenly"
                )
            )
        )
    assert claimed_by == {"backfill by oncall (ana)", "beat-a"}
    audit = [(e["actor"], e["path"], e["status_code"]) for e in api.get("/api/v1/audit").json()]
    assert ("oncall", "/api/v1/rules/tenly/backfill", 200) in audit


def test_two_concurrent_backfills_fire_each_slot_once(cluster: Cluster) -> None:
    add_schedule_rule(cluster, "minutely", "* * * * *")
    first_api, second_api = cluster.api(), cluster.api()
    end = floor(utcnow(), 1) - timedelta(minutes=30)
    start = end - timedelta(minutes=120)

    with ThreadPoolExecutor(2) as pool:
        answers = list(
            pool.map(
                lambda api: post_backfill(api, "minutely", start, end), [first_api, second_api]
            )
        )

    assert [a.status_code for a in answers] == [200, 200], [a.text for a in answers]
    fired: list[str] = []
    for answer in answers:
        slots = answer.json()["slots"]
        assert len(slots) == 120
        fired += [s["slot"] for s in slots if s["result"] == "fired"]
        assert {s["result"] for s in slots} <= {"fired", "already-fired", "in-progress"}
    assert len(fired) == 120 and len(set(fired)) == 120
    by_slot = runs_by_slot(cluster, "minutely")
    assert len(by_slot) == 120 and all(len(ids) == 1 for ids in by_slot.values())
    with cluster.session_factory() as session:
        rows = session.scalars(
            select(ScheduleOccurrenceRow).where(ScheduleOccurrenceRow.rule_id == "minutely")
        ).all()
    assert len(rows) == 120 and {row.outcome for row in rows} == {"fired"}
    assert {row.run_id for row in rows} == {ids[0] for ids in by_slot.values()}


def test_a_beat_firing_the_same_slots_during_backfills_never_double_fires_one(
    cluster: Cluster,
) -> None:
    """A real `ade-tasks beat` walks six simulated minutes of the past at 20x real time
    while backfills over the same minutes run now just ahead of it, now up to its clock."""
    add_schedule_rule(cluster, "raced", "* * * * *")
    api = cluster.api()
    origin = floor(utcnow(), 1) - timedelta(minutes=15)
    anchor = utcnow() + timedelta(seconds=2)
    speed = 20.0
    cluster.env.update(
        {
            "ADE_BEAT_CLOCK_ORIGIN": origin.isoformat(),
            "ADE_BEAT_CLOCK_ANCHOR": anchor.isoformat(),
            "ADE_BEAT_CLOCK_SPEED": str(speed),
            "ADE_REQUEUE_AFTER_SECONDS": "3600",  # no worker runs these: no re-sends
        }
    )
    cluster.beat()

    def simulated_now() -> datetime:
        return origin + (utcnow() - anchor) * speed

    last = origin + timedelta(minutes=6)
    answers = []
    while simulated_now() < last:
        # In the second half of every third minute the backfills reach one slot ahead of the
        # beat and fire it first (the beat then loses its claim); otherwise they trail its
        # clock by two simulated minutes (6 s: a beat slowed by the loop still makes it) and
        # find its runs.
        now = simulated_now()
        lead = (now - origin) // timedelta(minutes=1) % 3 == 0 and now.second >= 30
        reach = floor(now, 1) + timedelta(seconds=61) if lead else now - timedelta(minutes=2)
        ahead = min(reach, last)
        if ahead > origin:
            answer = post_backfill(api, "raced", origin, ahead)
            assert answer.status_code == 200, answer.text
            answers.append(answer.json())
        # Paced, not waited on: back-to-back calls on two cores starve the beat's ticks.
        time.sleep(0.25)

    wait_until(
        lambda: (
            max(runs_by_slot(cluster, "raced"), default="")
            >= (last - timedelta(minutes=1)).isoformat()
        ),
        30,
        "the slots up to the last one to fire",
    )
    by_slot = runs_by_slot(cluster, "raced")
    expected = [(origin + timedelta(minutes=n)).isoformat() for n in range(6)]
    assert all(len(by_slot.get(slot, [])) == 1 for slot in expected), by_slot
    with cluster.session_factory() as session:
        rows = session.scalars(
            select(ScheduleOccurrenceRow).where(
                ScheduleOccurrenceRow.rule_id == "raced", ScheduleOccurrenceRow.slot < last
            )
        ).all()
    by_whom = {row.claimed_by.split(" ")[0] for row in rows if row.outcome == "fired"}
    seen = [(f"{r.slot:%H:%M}", r.claimed_by[:12], r.duplicate_claims, r.outcome) for r in rows]
    assert "backfill" in by_whom and len(by_whom) == 2, seen  # the beat and backfills fired
    assert {row.outcome for row in rows} == {"fired"}
    assert sum(row.duplicate_claims for row in rows) > 0  # they raced for slots and one lost
    reported = {s["slot"]: s for a in answers for s in a["slots"] if s["result"] == "fired"}
    for slot, row in ((r.slot.isoformat(), r) for r in rows):
        if slot in reported:  # a slot a backfill fired is the run its occurrence records
            assert reported[slot]["run_id"] == row.run_id


def cli(cluster: Cluster, api: httpx.Client, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "ade-tasks"), "rules", "backfill", *args],
        env={**cluster.env, "ADE_API_URL": str(api.base_url)},
        cwd=cluster.tmp,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_cli_applies_the_overlap_policy_skip_and_explains_each_slot(
    cluster: Cluster,
) -> None:
    add_schedule_rule(cluster, "slow", "*/10 * * * *", overlap="skip", command="sleep 2")
    cluster.worker()
    api = cluster.api()
    end = floor(utcnow(), 10)
    start = end - timedelta(minutes=30)

    dry = cli(
        cluster, api, "slow", "--from", start.isoformat(), "--to", end.isoformat(), "--dry-run"
    )
    done = cli(cluster, api, "slow", "--from", start.isoformat(), "--to", end.isoformat())

    assert dry.returncode == 0, dry.stderr
    dry_lines = dry.stdout.strip().splitlines()
    assert [("  would-fire  " in line) for line in dry_lines] == [True, True, True, False]
    assert "(dry run: nothing was claimed or fired): 3 slot(s): 3 would-fire" in dry_lines[3]
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 4, done.stdout
    assert f"{start:%Y-%m-%d %H:%M} UTC ({start:%Y-%m-%d %H:%M} UTC)  #0  fired" in lines[0]
    for line in lines[1:3]:
        assert "  skipped  " in line
        assert "skipped by the overlap policy skip: 1 run(s) of rule 'slow' are active" in line
    assert lines[3].endswith("3 slot(s): 1 fired, 2 skipped")
    wait_until(lambda: "succeeded" in statuses(cluster, "slow"), 60, "the fired run to finish")
    assert sorted(statuses(cluster, "slow")) == ["skipped", "skipped", "succeeded"]

    naive = cli(cluster, api, "slow", "--from", "2026-11-30T08:00:00", "--to", end.isoformat())

    assert naive.returncode == 2
    assert "error: --from 2026-11-30T08:00:00 has no time zone" in naive.stderr


def test_refusals_name_the_field_and_the_kill_switch_needs_an_admin_to_force(
    cluster: Cluster,
) -> None:
    add_schedule_rule(cluster, "tenly", "*/10 * * * *")
    write_rule(cluster.tmp / "rules", "hello.yaml", """
        id: hello
        triggers: [{type: manual}]
        execution: {kind: built-in, actions: [{type: run-command, command: "true"}]}
        """)  # fmt: skip
    cluster.sync_rules(cluster.tmp / "rules")
    api = cluster.api()
    operator = bearer(cluster, "oncall", Role.OPERATOR)
    end = floor(utcnow(), 10)
    start = end - timedelta(minutes=10)

    def refused(rule_id: str, body: dict[str, Any], headers: dict[str, str]) -> tuple[int, str]:
        answer = api.post(f"/api/v1/rules/{rule_id}/backfill", json=body, headers=headers)
        return answer.status_code, answer.json()["detail"]

    good = {"from": start.isoformat(), "to": end.isoformat()}
    naive = refused("tenly", {**good, "from": "2026-11-30T08:00:00"}, operator)
    assert naive[0] == 422 and "from 2026-11-30T08:00:00 has no time zone" in naive[1]
    future = (utcnow() + timedelta(hours=1)).isoformat()
    assert refused("tenly", {**good, "to": future}, operator)[1].startswith("to: ")
    backwards = refused("tenly", {"from": end.isoformat(), "to": start.isoformat()}, operator)
    assert backwards[0] == 422 and backwards[1].startswith("from: ")
    huge = {"from": (end - timedelta(days=8)).isoformat(), "to": end.isoformat()}
    assert "split it" in refused("tenly", huge, operator)[1]
    assert refused("hello", good, operator)[0] == 422
    assert refused("nope", good, operator)[0] == 404
    viewer = bearer(cluster, "watcher", Role.VIEWER)
    assert refused("tenly", good, viewer)[0] == 403
    with cluster.session_factory.begin() as session:
        rule_edits_db.set_enabled(session, "tenly", False)
    disabled = refused("tenly", good, operator)
    assert disabled[0] == 409 and "ade-tasks rules enable tenly" in disabled[1]
    with cluster.session_factory.begin() as session:
        rule_edits_db.set_enabled(session, "tenly", True)

    stopped = cluster.api(env={"ADE_DISABLE_AUTOMATIONS": "1"})
    answer = post_backfill(stopped, "tenly", start, end, headers=operator)
    assert answer.status_code == 409 and "ADE_DISABLE_AUTOMATIONS=1" in answer.json()["detail"]
    answer = post_backfill(stopped, "tenly", start, end, force=True, headers=operator)
    assert answer.status_code == 403 and "only an admin" in answer.json()["detail"]
    assert runs_by_slot(cluster, "tenly") == {}
    forced = post_backfill(stopped, "tenly", start, end, force=True)  # the admin token
    assert forced.status_code == 200, forced.text
    assert [s["result"] for s in forced.json()["slots"]] == ["fired"]
    with cluster.session_factory() as session:
        trigger = session.scalars(select(RunRow.trigger).where(RunRow.rule_id == "tenly")).one()
    assert trigger["forced_by"] == "tests"
