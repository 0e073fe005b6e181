"""Cluster notifications without services (issue 37, finding 4): routes and a rule's
`notify:`, the events found in the record (each queued once per route), delivery that retries
with backoff and logs, and a slow route that holds up only itself."""

from __future__ import annotations

import logging
import re
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from sqlalchemy import update

from ade_api.cli import main
from ade_tasks.clock import utcnow
from ade_tasks.db import notifications as outbox
from ade_tasks.db import occurrences as occ_db
from ade_tasks.db import one_shots as once_db
from ade_tasks.db.engine import SessionFactory
from ade_tasks.db.occurrences import OccurrenceKey
from ade_tasks.db.schema import QUESTION_TOOL, ApprovalRow, RunRow
from ade_tasks.notifications.delivery import claim, deliver, retry_policy
from ade_tasks.notifications.events import queue_events, queue_health_changes
from ade_tasks.notifications.routing import routes_for
from ade_tasks.rules.loader import parse_rule
from ade_tasks.rules.notify import NotificationEvent, NotifyPolicy
from ade_tasks.rules.rule import Rule
from ade_tasks.runs.dispatch import dispatch
from ade_tasks.runs.trigger_events import TriggerEvent
from ade_tasks.schedule.scheduler import Scheduler
from ade_tasks.settings import NotificationRoute, NotificationSettings, Settings
from ade_tasks.states import OccurrenceOutcome
from ade_tasks.testing import InMemorySender
from ade_workers.integrations.notifier import Notifier
from tests.conftest import write_rule
from tests.support import wait_until
from tests.unit.conftest import add_rule

ACTIONS = {"kind": "built-in", "actions": [{"type": "run-command", "command": "true"}]}
EVENTS = list(NotificationEvent)


def settings_with(**routes: list[NotificationEvent]) -> NotificationSettings:
    return NotificationSettings(
        routes={
            name: NotificationRoute(url=f"json://127.0.0.1:9/{name}", events=events)  # type: ignore[arg-type]
            for name, events in routes.items()
        },
        retry_seconds=30,
        attempts=2,
    )


def parsed(notify: Any) -> Rule | list[str]:
    document = {"id": "nightly", "triggers": [{"type": "manual"}], "execution": ACTIONS}
    result = parse_rule({**document, "notify": notify}, "nightly.yaml")
    return result if isinstance(result, Rule) else [str(p) for p in result]


# --- routes and a rule's notify: ----------------------------------------------------------


def test_an_event_goes_to_every_route_that_takes_it_unless_the_rule_narrows_or_stops_it() -> None:
    routes = settings_with(
        mail=EVENTS, chat=[NotificationEvent.RUN_FAILED, NotificationEvent.APPROVAL_WAITING]
    ).routes
    failed, missed = NotificationEvent.RUN_FAILED, NotificationEvent.OCCURRENCE_MISSED
    assert routes_for(failed, None, routes) == ["chat", "mail"]
    assert routes_for(missed, None, routes) == ["mail"]
    assert routes_for(failed, NotifyPolicy(enabled=False), routes) == []
    assert routes_for(failed, NotifyPolicy(routes=["chat"]), routes) == ["chat"]
    assert routes_for(missed, NotifyPolicy(routes=["chat"]), routes) == []  # chat does not take it
    only_failures = NotifyPolicy(events=[failed])
    assert routes_for(failed, only_failures, routes) == ["chat", "mail"]
    assert routes_for(missed, only_failures, routes) == []
    assert routes_for(failed, NotifyPolicy(routes=["pager"]), routes) == []  # not configured


def test_a_rule_says_notify_off_or_names_routes_and_events() -> None:
    off = parsed(False)
    narrowed = parsed({"routes": ["team-chat"], "events": ["run.failed", "approval.waiting"]})
    assert isinstance(off, Rule) and off.notify == NotifyPolicy(enabled=False)
    assert isinstance(narrowed, Rule) and narrowed.notify == NotifyPolicy(
        routes=["team-chat"],
        events=[NotificationEvent.RUN_FAILED, NotificationEvent.APPROVAL_WAITING],
    )


def test_an_unknown_event_or_a_bad_route_name_is_refused_with_what_to_write() -> None:
    (event_problem,) = parsed({"events": ["run.failure"]})
    assert event_problem.startswith("nightly.yaml:notify.events.0: 'run.failure' is not allowed")
    assert "'run.failed'" in event_problem and "'occurrence.missed'" in event_problem
    (route_problem,) = parsed({"routes": ["Team Chat"]})
    assert route_problem.startswith("nightly.yaml:notify.routes: 'Team Chat' is no route name")
    (shape_problem,) = parsed("yes please")
    assert shape_problem == (
        "nightly.yaml:notify: must be a mapping (field: value), not the string 'yes please'"
    )


def test_rules_validate_warns_of_a_route_these_settings_do_not_configure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ADE_NOTIFICATIONS__ROUTES__OPS__URL", "mailto://u:p@127.0.0.1/?to=a@b.c")
    base = "id: {id}\ntriggers: [{{type: manual}}]\nexecution: {{kind: built-in, actions: [{{type: run-command, command: 'true'}}]}}\n"
    write_rule(tmp_path, "a.yaml", base.format(id="to-ops") + "notify: {routes: [ops]}\n")
    write_rule(tmp_path, "b.yaml", base.format(id="to-chat") + "notify: {routes: [chat, ops]}\n")

    result = CliRunner().invoke(main, ["rules", "validate", str(tmp_path)])

    assert result.exit_code == 0, result.output
    assert (
        "warning: rule 'to-chat': notify.routes names chat, which these settings do not "
        "configure (configured: ops)"
    ) in result.output
    assert "'to-ops'" not in result.output


# --- the events found in the record -------------------------------------------------------


@pytest.fixture
def nightly(session_factory: SessionFactory, rules_dir: Path) -> str:
    add_rule(
        session_factory,
        rules_dir,
        "nightly",
        "id: nightly\ntriggers: [{type: manual}]\n"
        "execution: {kind: built-in, actions: [{type: run-command, command: 'true'}]}\n",
    )
    return "nightly"


def finished_run(session_factory: SessionFactory, rule_id: str, status: str, error: str) -> str:
    run_id = dispatch(session_factory, InMemorySender(), rule_id, TriggerEvent.manual()).run.id
    with session_factory.begin() as session:
        session.execute(
            update(RunRow)
            .where(RunRow.id == run_id)
            .values(status=status, error=error, finished_at=utcnow())
        )
    return run_id


def queued(session_factory: SessionFactory, prefix: str = "") -> list[tuple[str, str]]:
    with session_factory() as session:
        return [(row.key, row.route) for row in outbox.list_notifications(session, prefix)]


def test_a_failed_and_a_timed_out_run_are_queued_once_per_route(
    session_factory: SessionFactory, nightly: str
) -> None:
    settings = settings_with(mail=EVENTS, chat=[NotificationEvent.RUN_FAILED])
    failed = finished_run(session_factory, nightly, "failed", "step tests exited 1")
    timed_out = finished_run(session_factory, nightly, "timed_out", "ran past 30 min")
    finished_run(session_factory, nightly, "succeeded", "")

    first = queue_events(session_factory, settings, utcnow(), link_base="http://ade.example")
    again = queue_events(session_factory, settings, utcnow())  # a second sweep, same window

    assert (first, again) == (3, 0)
    assert sorted(queued(session_factory)) == [
        (f"run.failed:{failed}", "chat"),
        (f"run.failed:{failed}", "mail"),
        (f"run.timed_out:{timed_out}", "mail"),
    ]
    with session_factory() as session:
        row = outbox.list_notifications(session, f"run.failed:{failed}")[0]
    assert row.title == "ADE: rule nightly: run failed"
    assert "Error: step tests exited 1" in row.body
    assert f"http://ade.example/ui/runs/{failed}" in row.body


def test_a_rule_with_notify_off_is_not_notified(
    session_factory: SessionFactory, rules_dir: Path
) -> None:
    add_rule(
        session_factory,
        rules_dir,
        "quiet",
        "id: quiet\nnotify: off\ntriggers: [{type: manual}]\n"
        "execution: {kind: built-in, actions: [{type: run-command, command: 'true'}]}\n",
    )
    finished_run(session_factory, "quiet", "failed", "boom")
    missed_one_shot(session_factory, "quiet")
    assert queue_events(session_factory, settings_with(mail=EVENTS), utcnow()) == 0


def test_an_approval_and_a_question_waiting_are_queued_with_how_to_answer(
    session_factory: SessionFactory, nightly: str
) -> None:
    gate_run = finished_run(session_factory, nightly, "waiting", "")
    ask_run = finished_run(session_factory, nightly, "waiting", "")
    with session_factory.begin() as session:
        session.add(ApprovalRow(run_id=gate_run, step_index=0, reason="deploy?", status="pending"))
        session.add(
            ApprovalRow(
                run_id=ask_run,
                step_index=1,
                reason="Which branch?",
                status="pending",
                tool=QUESTION_TOOL,
                tool_call_id="call-1",
            )
        )
        session.add(ApprovalRow(run_id=ask_run, step_index=2, reason="old", status="approved"))

    assert queue_events(session_factory, settings_with(mail=EVENTS), utcnow()) == 2

    with session_factory() as session:
        gate = outbox.list_notifications(session, "approval.waiting:")
        question = outbox.list_notifications(session, "question.waiting:")
    assert [row.run_id for row in gate] == [gate_run]
    assert f"ade-tasks runs approve {gate_run}" in gate[0].body and "deploy?" in gate[0].body
    assert [row.run_id for row in question] == [ask_run]
    assert "Which branch?" in question[0].body and "inputs answer" in question[0].body


def test_missed_occurrences_of_one_claim_are_one_notification(
    session_factory: SessionFactory, nightly: str
) -> None:
    start = utcnow().replace(second=0, microsecond=0) - timedelta(minutes=30)
    keys = [OccurrenceKey(nightly, 0, "* * * * *", start + timedelta(minutes=m)) for m in range(5)]
    with session_factory.begin() as session:
        occ_db.claim(session, keys, "beat-1", OccurrenceOutcome.MISSED)

    assert queue_events(session_factory, settings_with(mail=EVENTS), utcnow()) == 1

    (row,) = queued(session_factory, "occurrence.missed:")
    with session_factory() as session:
        (notice,) = outbox.list_notifications(session, "occurrence.missed:")
    assert row[0].startswith("occurrence.missed:nightly:0:")
    assert "5 slots missed" in notice.body and "rules backfill" in notice.body


def missed_one_shot(session_factory: SessionFactory, rule_id: str) -> str:
    """A scheduled manual run due ten minutes ago, judged missed by a beat's tick."""
    with session_factory.begin() as session:
        row, _ = once_db.schedule_manual(
            session, rule_id, utcnow() - timedelta(minutes=10), inputs={}, requested_by="ann"
        )
    Scheduler(session_factory, InMemorySender(), "beat-1", refresh_every=timedelta(0)).tick()
    return row.id


def test_a_missed_one_shot_is_one_notification_per_route(
    session_factory: SessionFactory, nightly: str
) -> None:
    scheduled_id = missed_one_shot(session_factory, nightly)
    settings = settings_with(mail=EVENTS, chat=[NotificationEvent.RUN_FAILED])

    first = queue_events(session_factory, settings, utcnow(), link_base="http://ade.example")
    again = queue_events(session_factory, settings, utcnow())

    assert (first, again) == (1, 0)
    key = f"occurrence.missed:once:{scheduled_id}"
    assert queued(session_factory, "occurrence.missed:") == [(key, "mail")]
    with session_factory() as session:
        (notice,) = outbox.list_notifications(session, key)
    assert notice.title == "ADE: rule nightly: a scheduled run missed"
    assert f"Scheduled run {scheduled_id} of rule nightly (manual, by ann) was" in notice.body
    assert "no beat could fire it within 1min 0s" in notice.body
    assert "Run it now: ade-tasks run nightly" in notice.body
    assert "http://ade.example/ui/rules/nightly" in notice.body


def test_a_health_change_is_queued_and_the_first_health_seen_is_only_a_baseline(
    session_factory: SessionFactory, nightly: str
) -> None:
    settings = settings_with(mail=[NotificationEvent.RULE_HEALTH_CHANGED])
    state = {nightly: "ready"}
    start = datetime(2026, 12, 7, 10, tzinfo=UTC)

    def health(_session: object) -> dict[str, str]:
        return dict(state)

    baseline = queue_health_changes(session_factory, settings, health, start)
    steady = queue_health_changes(session_factory, settings, health, start + timedelta(minutes=1))
    state[nightly] = "not ready: no beat is running"
    changed = queue_health_changes(session_factory, settings, health, start + timedelta(minutes=2))
    steady_again = queue_health_changes(
        session_factory, settings, health, start + timedelta(minutes=3)
    )

    assert (baseline, steady, changed, steady_again) == (0, 0, 1, 0)
    with session_factory() as session:
        (row,) = outbox.list_notifications(session, "rule.health_changed:")
    assert row.title == "ADE: rule nightly is not ready"
    assert "was ready" in row.body and "now not ready: no beat is running" in row.body


# --- delivery -----------------------------------------------------------------------------


def test_a_route_that_is_down_is_retried_with_backoff_logged_then_given_up(
    session_factory: SessionFactory, nightly: str, caplog: pytest.LogCaptureFixture
) -> None:
    settings = settings_with(mail=EVENTS)  # attempts=2: three tries in all
    run_id = finished_run(session_factory, nightly, "failed", "boom")
    now = utcnow()
    queue_events(session_factory, settings, now)

    def down(route: str, _title: str, _body: str) -> None:
        raise ConnectionRefusedError(f"route {route!r}: connection refused")

    tries = []
    with caplog.at_level(logging.WARNING, logger="ade_tasks.notifications.delivery"):
        for second in (0, 1, 30, 89, 90, 600):
            at = now + timedelta(seconds=second)
            for notification in claim(session_factory, "test", at):
                tries.append(second)
                deliver(session_factory, notification, down, retry_policy(settings), lambda a=at: a)

    assert tries == [0, 30, 90]  # backoff 30 s, then 60 s; nothing after the last attempt
    (row,) = outbox.list_notifications(session_factory(), f"run.failed:{run_id}")
    assert (row.status, row.attempts) == ("failed", 3)
    assert row.error == "route 'mail': connection refused"
    messages = [r.getMessage() for r in caplog.records]
    assert f"notification run.failed:{run_id} to route 'mail' failed (attempt 1 of 3)" in messages[0]
    assert messages[0].endswith("retrying in 30 s") and messages[1].endswith("retrying in 60 s")
    assert "giving up" in messages[2]
    assert caplog.records[-1].levelno == logging.ERROR


def test_a_slow_route_holds_up_only_its_own_notifications(
    session_factory: SessionFactory, nightly: str
) -> None:
    settings = settings_with(slow=EVENTS, fast=EVENTS)
    release = threading.Event()
    delivered: list[tuple[str, str]] = []

    def send(route: str, title: str, body: str) -> None:
        if route == "slow":
            release.wait(10)
        delivered.append((route, body.splitlines()[0]))

    notifier = Notifier(session_factory, settings, send=send)
    first = finished_run(session_factory, nightly, "failed", "one")
    assert notifier.sweep(utcnow()) == {"queued": 2, "delivering": 2}
    second = finished_run(session_factory, nightly, "failed", "two")

    wait_until(
        lambda: notifier.busy_routes() == {"slow"}, 10, "the fast route to deliver the first"
    )
    # While the slow route hangs, the fast one delivers both, and the slow one's second
    # notification stays unclaimed instead of queueing behind the first.
    result = notifier.sweep(utcnow())
    assert result == {"queued": 2, "delivering": 1}
    release.set()
    notifier.wait(10)
    assert notifier.sweep(utcnow() + timedelta(seconds=1)) == {"queued": 0, "delivering": 1}
    notifier.wait(10)

    assert sorted(delivered) == sorted(
        (route, f"Run {run} of rule nightly failed.")
        for route in ("fast", "slow")
        for run in (first, second)
    )
    assert delivered[0][0] == "fast"
    with session_factory() as session:
        assert {row.status for row in outbox.list_notifications(session)} == {"sent"}


def test_nothing_is_queued_without_routes(session_factory: SessionFactory, nightly: str) -> None:
    finished_run(session_factory, nightly, "failed", "boom")
    assert queue_events(session_factory, Settings().notifications, utcnow()) == 0
    assert queued(session_factory) == []


def test_what_apprise_says_of_a_failure_is_kept_without_the_routes_secrets() -> None:
    from ade_workers.integrations.apprise_route import _scrubbed

    url = "json://bot:s3cret-pw@hooks.example/services/T0/B0/tok3n"
    said = (
        f"Failed to reach {url}: HTTPSConnectionPool(host='hooks.example', port=443): Max "
        "retries exceeded with url: /services/T0/B0/tok3n (Caused by timeout), as s3cret-pw"
    )

    assert _scrubbed(said, url) == (
        "Failed to reach ***: HTTPSConnectionPool(host='hooks.example', port=443): Max retries "
        "exceeded with url: *** (Caused by timeout), as ***"
    )


def test_the_apis_health_job_notifies_when_a_schedule_rule_loses_its_beat(
    session_factory: SessionFactory, rules_dir: Path
) -> None:
    from ade_api.http.health_watch import health_job
    from ade_tasks.db import heartbeats as heartbeats_db

    add_rule(
        session_factory,
        rules_dir,
        "nightly",
        "id: nightly\ntriggers: [{type: schedule, cron: '0 3 * * *'}]\n"
        "execution: {kind: built-in, actions: [{type: run-command, command: 'true'}]}\n",
    )
    settings = Settings(
        notifications=settings_with(mail=[NotificationEvent.RULE_HEALTH_CHANGED])
    )
    job = health_job(session_factory, settings)
    now = utcnow()
    with session_factory.begin() as session:  # a beat is alive: the rule is ready
        heartbeats_db.record(session, "beat-1", heartbeats_db.BEAT, every=5, now=now)

    baseline = job.run(now)
    later = now + timedelta(minutes=5)  # the beat has not been heard of since
    changed = job.run(later)
    again = job.run(later + timedelta(seconds=10))

    assert (baseline, changed, again) == (0, 1, 0)
    with session_factory() as session:
        (row,) = outbox.list_notifications(session, "rule.health_changed:nightly:")
    assert row.title == "ADE: rule nightly is not ready"
    assert "was ready" in row.body and "no beat is running" in row.body


DOC_BLOCKS = re.findall(
    r"```yaml\n(.*?)```", (Path(__file__).resolve().parents[3] / "docs/notifications.md").read_text(), re.S
)


@pytest.mark.parametrize("block", DOC_BLOCKS, ids=[f"block{i}" for i in range(len(DOC_BLOCKS))])
def test_each_yaml_example_of_the_notifications_page_is_a_valid_rule(block: str) -> None:
    parsed = parse_rule(yaml.safe_load(block), "docs/notifications.md")
    assert isinstance(parsed, Rule), [str(p) for p in parsed]
    assert parsed.notify is not None


def test_the_notifications_page_shows_its_examples() -> None:
    assert len(DOC_BLOCKS) == 2


def test_the_notifications_job_runs_only_where_routes_are_configured(
    session_factory: SessionFactory,
) -> None:
    import ade_workers.integrations.notifier  # noqa: F401  (registers its jobs, as beats do)
    from ade_tasks.housekeeping import standard_jobs

    def names(settings: Settings) -> list[str]:
        jobs = standard_jobs(session_factory, InMemorySender(), settings)
        return [job.name for job in jobs if job.name.startswith("notifications")]

    assert names(Settings()) == ["notifications-prune"]
    routed = Settings(notifications=settings_with(mail=EVENTS))
    assert names(routed) == ["notifications", "notifications-prune"]
