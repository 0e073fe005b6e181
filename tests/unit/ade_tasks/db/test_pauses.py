"""Pausing a rule or one trigger with a note, and the cluster's kill switch, on SQLite: paused
slots are recorded skipped with the note, manual runs still start, bad pause requests are
refused with the field, and ADE_DISABLE_AUTOMATIONS refuses every trigger but a forced manual
run while webhook deliveries are held, not lost."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import select

from ade_tasks.db import ingress as ingress_db
from ade_tasks.db import pauses as pauses_db
from ade_tasks.db.engine import SessionFactory
from ade_tasks.db.schema import RunRow, ScheduleOccurrenceRow
from ade_tasks.errors import AdmissionError, InvalidInputError, NotFoundError
from ade_tasks.runs.dispatch import AUTOMATIONS_DISABLED, dispatch
from ade_tasks.runs.trigger_events import TriggerEvent
from ade_tasks.schedule.scheduler import Scheduler
from ade_tasks.states import IngressStatus
from ade_tasks.testing import InMemorySender
from ade_tasks.triggers.ingress_events import match_ingress_event
from ade_tasks.triggers.local_events import emit
from tests.scheduler_support import FakeClock
from tests.unit.ade_tasks.triggers.test_ingress_events import OPENED, rule, store_pr
from tests.unit.conftest import add_rule

TWO_SCHEDULES = """
    id: nightly
    triggers:
      - {type: schedule, cron: "* * * * *"}
      - {type: schedule, cron: "*/2 * * * *"}
      - {type: manual}
      - {type: webhook, hook: ci}
    guardrails: {overlap: allow-all}
    execution: {kind: built-in, actions: [{type: run-command, command: "true"}]}
"""


@pytest.fixture
def nightly(session_factory: SessionFactory, rules_dir: Path) -> None:
    add_rule(session_factory, rules_dir, "nightly.yaml", TWO_SCHEDULES)


def pause(session_factory: SessionFactory, index: int | None, note: str) -> pauses_db.Pause:
    with session_factory.begin() as session:
        return pauses_db.pause(session, "nightly", index, note, "alice")


def occurrences(session_factory: SessionFactory) -> list[tuple[int, str, str | None]]:
    with session_factory() as session:
        rows = session.scalars(
            select(ScheduleOccurrenceRow).order_by(
                ScheduleOccurrenceRow.slot, ScheduleOccurrenceRow.trigger_index
            )
        ).all()
        return [(r.trigger_index, r.outcome, r.reason) for r in rows]


def test_a_paused_rule_records_its_slots_skipped_with_the_note_and_fires_again_on_resume(
    session_factory: SessionFactory, sender: InMemorySender, nightly: None
) -> None:
    clock = FakeClock()
    beat = Scheduler(session_factory, sender, "beat", clock=clock)
    beat.tick()
    pause(session_factory, None, "deploy freeze")

    clock.advance(60)  # 10:01: only the minutely trigger is due
    report = beat.tick()

    ((index, outcome, reason),) = occurrences(session_factory)
    assert (index, outcome) == (0, "skipped") and list(report.skipped) and not report.fired
    assert reason is not None and "rule 'nightly' is paused by alice since" in reason
    assert reason.endswith("deploy freeze; resume with `ade-tasks rules resume nightly`")

    with session_factory.begin() as session:
        pauses_db.resume(session, "nightly", None)
    clock.advance(60)  # 10:02: both triggers are due and fire
    assert len(beat.tick().fired) == 2


def test_a_paused_trigger_skips_only_its_own_slots(
    session_factory: SessionFactory, sender: InMemorySender, nightly: None
) -> None:
    clock = FakeClock()
    beat = Scheduler(session_factory, sender, "beat", clock=clock)
    beat.tick()
    pause(session_factory, 1, "every other minute is too often")

    for _ in range(2):  # 10:01 and 10:02 for trigger 0, 10:02 for trigger 1
        clock.advance(60)
        beat.tick()

    found = occurrences(session_factory)
    assert [(i, o) for i, o, _ in found] == [(0, "fired"), (0, "fired"), (1, "skipped")]
    reason = found[2][2]
    assert reason is not None and reason.startswith("trigger #1 of rule 'nightly' is paused")
    assert "resume with `ade-tasks rules resume nightly --trigger 1`" in reason


def test_a_paused_rule_refuses_events_but_still_runs_manually(
    session_factory: SessionFactory, sender: InMemorySender, nightly: None
) -> None:
    pause(session_factory, None, "investigating flaky runs")

    with pytest.raises(AdmissionError, match="investigating flaky runs"):
        dispatch(session_factory, sender, "nightly", TriggerEvent("webhook", "ci ping"))
    assert dispatch(session_factory, sender, "nightly", TriggerEvent.manual()).created


def test_an_event_matched_by_a_paused_trigger_only_is_refused_with_its_note(
    session_factory: SessionFactory, sender: InMemorySender, nightly: None
) -> None:
    pause(session_factory, 3, "the CI hook is noisy")
    event = TriggerEvent("webhook", "ci ping", {"hook": "ci"}, "webhook:ci:1")

    ((rule_id, result),) = emit(session_factory, sender, event, lambda _r, _t: None)

    assert rule_id == "nightly" and isinstance(result, AdmissionError)
    assert "trigger #3 of rule 'nightly' is paused" in result.message
    assert "the CI hook is noisy" in result.message


def test_pausing_again_replaces_the_note(session_factory: SessionFactory, nightly: None) -> None:
    pause(session_factory, None, "first")
    pause(session_factory, None, "second")
    with session_factory() as session:
        (found,) = pauses_db.pauses_of(session, ["nightly"])["nightly"]
    assert found.note == "second"


@pytest.mark.parametrize(
    ("index", "note", "expected"),
    [
        (None, "  ", "needs a note saying why (note: is empty)"),
        (7, "x", "rule 'nightly' has no trigger #7 (trigger_index: it has 4 trigger(s)"),
        (-2, "x", "has no trigger #-2"),
        (2, "x", "trigger #2 of rule 'nightly' is manual, and manual runs are never paused"),
        (None, "x" * 1001, "has 1001 characters; keep it to 1000"),
    ],
)
def test_a_bad_pause_is_refused_naming_the_field(
    session_factory: SessionFactory, nightly: None, index: int | None, note: str, expected: str
) -> None:
    with pytest.raises(InvalidInputError) as refused:
        pause(session_factory, index, note)
    assert expected in refused.value.message


def test_pausing_an_unknown_rule_or_resuming_what_is_not_paused_is_refused(
    session_factory: SessionFactory, nightly: None
) -> None:
    with session_factory.begin() as session, pytest.raises(NotFoundError, match="'ghost'"):
        pauses_db.pause(session, "ghost", None, "x", "alice")
    pause(session_factory, 0, "x")
    with session_factory.begin() as session, pytest.raises(NotFoundError) as refused:
        pauses_db.resume(session, "nightly", None)
    assert refused.value.message == (
        "rule 'nightly' is not paused, so there is nothing to resume (paused: trigger #0)"
    )


# --- the kill switch ---------------------------------------------------------------------------


def test_the_kill_switch_refuses_manual_runs_unless_an_admin_forced_them(
    session_factory: SessionFactory, sender: InMemorySender, nightly: None
) -> None:
    with pytest.raises(AdmissionError) as refused:
        dispatch(
            session_factory, sender, "nightly", TriggerEvent.manual(), automations_disabled=True
        )
    assert refused.value.message == f"rule 'nightly' not run: {AUTOMATIONS_DISABLED}"

    forced = TriggerEvent.manual(by="bob", forced_by="root (bob)")
    result = dispatch(session_factory, sender, "nightly", forced, automations_disabled=True)

    assert result.created and result.run.trigger["forced_by"] == "root (bob)"
    with session_factory() as session:
        assert session.scalars(select(RunRow.id)).all() == [result.run.id]


def test_the_kill_switch_records_every_slot_skipped_with_the_reason(
    session_factory: SessionFactory, sender: InMemorySender, nightly: None
) -> None:
    clock = FakeClock()
    beat = Scheduler(session_factory, sender, "beat", clock=clock, automations_disabled=True)
    beat.tick()
    for _ in range(2):
        clock.advance(60)
        beat.tick()

    found = occurrences(session_factory)
    assert [o for _, o, _ in found] == ["skipped"] * 3
    assert all(r is not None and "ADE_DISABLE_AUTOMATIONS=1" in r for _, _, r in found)
    assert sender.sent == []


def test_a_delivery_while_automations_are_disabled_is_held_then_runs_once_they_are_on(
    session_factory: SessionFactory, sender: InMemorySender, rules_dir: Path
) -> None:
    add_rule(session_factory, rules_dir, "pr.yaml", rule("pr", OPENED))
    event_id = store_pr(session_factory, sender, "held-1")

    held = match_ingress_event(session_factory, sender, event_id, automations_disabled=True)

    with session_factory() as session:
        row = ingress_db.get_event(session, event_id)
        assert row is not None and row.status == IngressStatus.RECEIVED and row.attempts == 0
        assert session.scalars(select(RunRow.id)).all() == []
    assert held is None
    # The switch is off again (the processes restarted without it): the sweep's re-send runs it.
    assert match_ingress_event(session_factory, sender, event_id) == IngressStatus.DISPATCHED
    with session_factory() as session:
        assert session.scalars(select(RunRow.rule_id)).all() == ["pr"]
