"""One-shot schedules: bad input refused with the field; one beat (SQLite) fires each once."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import select

from ade_api.cli import main
from ade_tasks.clock import utcnow
from ade_tasks.db import one_shots as once_db
from ade_tasks.db.engine import SessionFactory
from ade_tasks.db.schema import RunRow, ScheduledRunRow
from ade_tasks.errors import ConflictError
from ade_tasks.rules.loader import load_rules_dir
from ade_tasks.schedule.scheduler import Scheduler
from ade_tasks.testing import InMemorySender
from tests.conftest import write_rule
from tests.unit.conftest import add_rule

RULE = """
id: once
triggers: [{type: schedule, %s}]
execution: {kind: built-in, actions: [{type: run-command, command: "true"}]}
"""


def problems_of(tmp_path: Path, trigger: str) -> list[str]:
    write_rule(tmp_path, "once.yaml", RULE % trigger)
    return [f"{p.field}: {p.reason}" for p in load_rules_dir(tmp_path).problems]


def test_a_run_at_without_a_zone_is_refused_with_the_field(tmp_path: Path) -> None:
    (problem,) = problems_of(tmp_path, "run_at: '2030-12-24T18:00:00'")
    assert problem.startswith("triggers.0.run_at: run_at 2030-12-24T18:00:00 has no time zone")
    assert "write it with Z or an offset" in problem


def test_an_unquoted_yaml_timestamp_without_a_zone_is_refused_too(tmp_path: Path) -> None:
    (problem,) = problems_of(tmp_path, "run_at: 2030-12-24T18:00:00")
    assert problem.startswith("triggers.0.run_at: run_at 2030-12-24T18:00:00 has no time zone")


def test_a_run_at_in_the_past_beyond_catch_up_is_refused(tmp_path: Path) -> None:
    past = (utcnow() - timedelta(hours=2)).isoformat()
    (problem,) = problems_of(tmp_path, f"run_at: '{past}', catchup_window: 1h")
    assert problem.startswith("triggers.0.run_at: run_at ")
    assert "in the past, beyond its catchup_window (1h 0min), so it would never fire" in problem


def test_a_run_at_in_the_past_within_catch_up_is_admitted(tmp_path: Path) -> None:
    past = (utcnow() - timedelta(minutes=30)).isoformat()
    assert problems_of(tmp_path, f"run_at: '{past}', catchup_window: 1h") == []


def test_cron_and_run_at_together_are_refused_with_the_field(tmp_path: Path) -> None:
    (problem,) = problems_of(tmp_path, "cron: '0 3 * * *', run_at: '2030-01-01T00:00:00Z'")
    assert problem.startswith("triggers.0.run_at: run_at cannot be combined with cron")


def test_run_at_and_delay_seconds_together_are_refused(tmp_path: Path) -> None:
    (problem,) = problems_of(tmp_path, "run_at: '2030-01-01T00:00:00Z', delay_seconds: 5")
    assert problem.startswith(
        "triggers.0.delay_seconds: delay_seconds cannot be combined with run_at"
    )


def test_a_negative_delay_is_refused_with_the_field(tmp_path: Path) -> None:
    (problem,) = problems_of(tmp_path, "delay_seconds: -5")
    assert problem.startswith("triggers.0.delay_seconds: delay_seconds must be 0 or more (got -5)")


def test_the_cli_refuses_at_and_in_together() -> None:
    result = CliRunner().invoke(main, ["run", "r", "--at", "2030-01-01T00:00:00Z", "--in", "5m"])
    assert result.exit_code == 2
    assert "error: give --at TIME or --in DURATION, not both" in result.output


def test_the_cli_refuses_a_bad_duration() -> None:
    result = CliRunner().invoke(main, ["run", "r", "--in", "ten minutes"])
    assert result.exit_code == 2
    assert "error: --in: 'ten minutes' is not a duration; write e.g. 90s, 15m, 2h or 1d" in (
        result.output
    )


def test_the_cli_refuses_an_at_without_a_zone() -> None:
    result = CliRunner().invoke(main, ["run", "r", "--at", "2030-12-24T18:00:00"])
    assert result.exit_code == 2
    assert "error: --at 2030-12-24T18:00:00 has no time zone" in result.output


def beat(session_factory: SessionFactory, name: str = "beat-1") -> Scheduler:
    return Scheduler(session_factory, InMemorySender(), name, refresh_every=timedelta(0))


def scheduled(session_factory: SessionFactory) -> list[ScheduledRunRow]:
    with session_factory() as session:
        return list(session.scalars(select(ScheduledRunRow).order_by(ScheduledRunRow.run_at)))


def test_a_delay_trigger_fires_once_counted_from_when_the_rule_version_was_stored(
    session_factory: SessionFactory, rules_dir: Path
) -> None:
    add_rule(session_factory, rules_dir, "once.yaml", RULE % "delay_seconds: 0")
    first, second = beat(session_factory, "a"), beat(session_factory, "b")

    for _ in range(3):
        first.tick()
        second.tick()
    add_rule(session_factory, rules_dir, "once.yaml", RULE % "delay_seconds: 0")  # unchanged
    first.tick()

    (row,) = scheduled(session_factory)
    with session_factory() as session:
        runs = session.scalars(select(RunRow)).all()
    assert row.status == "fired" and [r.id for r in runs] == [row.run_id]
    assert runs[0].trigger_type == "schedule" and runs[0].trigger["once"] == "delay_seconds=0"


def test_editing_a_pending_one_shot_trigger_replaces_it(
    session_factory: SessionFactory, rules_dir: Path
) -> None:
    add_rule(session_factory, rules_dir, "once.yaml", RULE % "delay_seconds: 3600")
    beat(session_factory).tick()
    add_rule(session_factory, rules_dir, "once.yaml", RULE % "delay_seconds: 7200")
    beat(session_factory).tick()

    old, new = scheduled(session_factory)
    assert (old.status, new.status) == ("cancelled", "pending")
    assert old.reason and old.reason.startswith("replaced: the trigger now fires at ")


def manual_rule(session_factory: SessionFactory, rules_dir: Path) -> None:
    add_rule(
        session_factory,
        rules_dir,
        "manual.yaml",
        """
        id: manual
        triggers: [{type: manual}]
        execution: {kind: built-in, actions: [{type: run-command, command: "true"}]}
        """,
    )


def test_a_scheduled_manual_run_fires_once_and_a_cancelled_one_never(
    session_factory: SessionFactory, rules_dir: Path
) -> None:
    manual_rule(session_factory, rules_dir)
    now = utcnow()
    with session_factory.begin() as session:
        due, _ = once_db.schedule_manual(session, "manual", now, inputs={}, requested_by="ann")
        kept, _ = once_db.schedule_manual(session, "manual", now, inputs={}, requested_by="bob")
        once_db.cancel(session, kept.id, "bob")
    for _ in range(3):
        beat(session_factory).tick()

    rows = {row.id: row for row in scheduled(session_factory)}
    with session_factory() as session:
        runs = session.scalars(select(RunRow)).all()
    assert rows[due.id].status == "fired" and [r.id for r in runs] == [rows[due.id].run_id]
    assert runs[0].trigger_summary.startswith("manual run scheduled by ann for ")
    assert rows[kept.id].status == "cancelled" and rows[kept.id].reason == "cancelled by bob"
    with session_factory.begin() as session, pytest.raises(ConflictError, match="is fired as run"):
        once_db.cancel(session, due.id, "ann")


def test_a_scheduled_run_later_than_its_catch_up_is_recorded_missed(
    session_factory: SessionFactory, rules_dir: Path
) -> None:
    manual_rule(session_factory, rules_dir)
    long_ago = utcnow() - timedelta(minutes=10)
    with session_factory.begin() as session:
        late, _ = once_db.schedule_manual(session, "manual", long_ago, inputs={}, requested_by="")
        caught, _ = once_db.schedule_manual(
            session, "manual", long_ago, inputs={}, requested_by="",
            catchup_window=timedelta(hours=1),
        )  # fmt: skip
    beat(session_factory).tick()

    rows = {row.id: row for row in scheduled(session_factory)}
    assert rows[late.id].status == "missed" and rows[late.id].run_id is None
    assert "no beat could fire it within 1min 0s" in (rows[late.id].reason or "")
    assert rows[caught.id].status == "fired"


def test_the_kill_switch_skips_a_due_one_shot_with_the_reason(
    session_factory: SessionFactory, rules_dir: Path
) -> None:
    add_rule(session_factory, rules_dir, "once.yaml", RULE % "delay_seconds: 0")
    disabled = Scheduler(
        session_factory, InMemorySender(), "beat-1", refresh_every=timedelta(0),
        automations_disabled=True,
    )  # fmt: skip

    for _ in range(3):
        disabled.tick()

    with session_factory() as session:
        runs = session.scalars(select(RunRow)).all()
    (row,) = scheduled(session_factory)
    assert runs == []
    assert row.status == "skipped" and "ADE_DISABLE_AUTOMATIONS=1" in (row.reason or "")
