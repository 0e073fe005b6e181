"""A rule stored before validation refused crons that never fire (`0 0 30 2 *`) on a real
cluster: a real `ade-tasks beat` still fires every other schedule and still runs the recovery
sweep, and the schedule API, `ade-tasks rules show` and the web page answer with the rule's
problem instead of an error. PostgreSQL, Redis, real beat, worker and API processes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import select

from ade_tasks.clock import utcnow
from ade_tasks.db.schema import RunRow, ScheduleOccurrenceRow
from ade_tasks.runs.dispatch import dispatch
from ade_tasks.runs.trigger_events import TriggerEvent
from ade_tasks.testing import InMemorySender
from tests.conftest import write_rule
from tests.integration.conftest import Cluster
from tests.integration.test_cli_cluster import cli
from tests.support import wait_until
from tests.unit.ade_tasks.schedule.test_scheduler_boundaries import ACTIONS, IMPOSSIBLE, store_rule

NEVER = "never fires"


def test_a_beat_fires_the_other_schedules_and_recovers_lost_runs_beside_an_impossible_cron(
    cluster: Cluster,
) -> None:
    rules_dir = cluster.tmp / "rules"
    write_rule(rules_dir, "tick.yaml", """
        id: tick
        triggers: [{type: schedule, cron: "* * * * *"}]
        guardrails: {overlap: allow-all}
        execution: {kind: built-in, actions: [{type: run-command, command: "echo tock"}]}
        """)  # fmt: skip
    write_rule(rules_dir, "hello.yaml", """
        id: hello
        triggers: [{type: manual}]
        execution: {kind: built-in, actions: [{type: run-command, command: "echo hi"}]}
        """)  # fmt: skip
    cluster.sync_rules(rules_dir)
    store_rule(cluster.session_factory, {**IMPOSSIBLE, "triggers": IMPOSSIBLE["triggers"][:1]})
    # Simulated minutes of 5 real seconds, so the minutely rule fires soon.
    origin = datetime(2026, 11, 30, 9, 59, 30, tzinfo=UTC)
    cluster.env.update(
        {
            "ADE_BEAT_CLOCK_ORIGIN": origin.isoformat(),
            "ADE_BEAT_CLOCK_ANCHOR": (utcnow() + timedelta(seconds=2)).isoformat(),
            "ADE_BEAT_CLOCK_SPEED": "12",
        }
    )
    # Only the beat sweeps here (workers would too): the test shows the beat's sweep survives.
    cluster.worker(env={"ADE_WORKER_HOUSEKEEPING": "false"})
    # A run whose message the broker never got: only the beat's recovery sweep can send it.
    lost = dispatch(cluster.session_factory, InMemorySender(), "hello", TriggerEvent.manual())
    beat = cluster.beat()

    def status_of(run_id: str) -> str | None:
        with cluster.session_factory() as session:
            return session.scalar(select(RunRow.status).where(RunRow.id == run_id))

    def tick_fired() -> list[str]:
        with cluster.session_factory() as session:
            return list(
                session.scalars(
                    select(ScheduleOccurrenceRow.run_id).where(
                        ScheduleOccurrenceRow.rule_id == "tick",
                        ScheduleOccurrenceRow.outcome == "fired",
                    )
                )
            )

    wait_until(lambda: status_of(lost.run.id) == "succeeded", 60, f"the sweep ({beat.log})")
    assert f"re-sent ['{lost.run.id}']" in beat.output()  # by this beat's sweep
    fired = wait_until(tick_fired, 60, f"the minutely rule to fire ({beat.log})")
    wait_until(lambda: status_of(fired[0]) == "succeeded", 30, "the minutely run to finish")
    assert "rule february-30 trigger #0 is not scheduled" in beat.output()
    assert NEVER in beat.output()
    assert "beat tick" not in beat.output(), beat.output()[-3000:]  # no tick failed
    with cluster.session_factory() as session:
        bad = session.scalars(
            select(ScheduleOccurrenceRow).where(ScheduleOccurrenceRow.rule_id == "february-30")
        ).all()
    assert bad == []


def test_the_schedule_api_rules_show_and_the_web_page_name_the_problem(cluster: Cluster) -> None:
    store_rule(cluster.session_factory, IMPOSSIBLE)  # trigger 0 never fires, trigger 1 minutely
    store_rule(
        cluster.session_factory, {"id": "unreadable", "triggers": "daily", "execution": ACTIONS}
    )
    api = cluster.api()

    preview = api.get("/api/v1/rules/february-30/schedule", params={"count": 3})
    assert preview.status_code == 200, preview.text
    bad, good = preview.json()["triggers"]
    assert bad["next"] == [] and NEVER in bad["problem"] and "'0 0 30 2 *'" in bad["problem"]
    assert len(good["next"]) == 3 and good["problem"] is None
    assert preview.json()["problems"] == [bad["problem"]]

    unreadable = api.get("/api/v1/rules/unreadable/schedule")
    assert unreadable.status_code == 200, unreadable.text
    assert "stored document cannot be read" in unreadable.json()["problems"][0]

    page = api.get("/ui/rules")
    assert page.status_code == 200, page.text
    assert NEVER in page.text and "february-30" in page.text
    rule_page = api.get("/ui/rules/february-30")
    assert rule_page.status_code == 200 and NEVER in rule_page.text

    shown = cli(cluster, "rules", "show", "february-30", "--url", str(api.base_url))
    assert shown.returncode == 0, shown.stderr
    assert "problem: triggers.0: cron '0 0 30 2 *'" in shown.stdout and NEVER in shown.stdout


def test_a_cron_whose_meaning_changed_is_shown_as_its_problem(
    cluster: Cluster,
) -> None:
    # Given a rule stored by an earlier version, which read `5-5` as every minute
    store_rule(
        cluster.session_factory,
        {
            "id": "five-five",
            "triggers": [{"type": "schedule", "cron": "5-5 * * * *"}],
            "execution": ACTIONS,
        },
    )
    api = cluster.api()
    changed = "was stored by an earlier version, which read a range like 5-5 as *"

    # Then the schedule API, `rules show` and the web page say so and what to do
    preview = api.get("/api/v1/rules/five-five/schedule")
    assert preview.status_code == 200, preview.text
    (trigger,) = preview.json()["triggers"]
    assert trigger["next"] == [] and changed in trigger["problem"]
    assert "sync its file or save it to take the new meaning" in trigger["problem"]
    shown = cli(cluster, "rules", "show", "five-five", "--url", str(api.base_url))
    assert shown.returncode == 0, shown.stderr
    assert changed in shown.stdout
    page = api.get("/ui/rules/five-five")
    assert page.status_code == 200 and "was stored by an earlier version" in page.text
