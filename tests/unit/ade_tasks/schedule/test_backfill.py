"""Backfill on SQLite: the slots of a range in the trigger's zone, [from, to); never-claimed and
missed slots fired once, fired and skipped ones reported, the overlap policy applied and
explained, a dry run that claims nothing, and every bad input refused with its field."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import func, select

from ade_tasks.db import occurrences as occ_db
from ade_tasks.db import pauses as pauses_db
from ade_tasks.db import rule_edits as rule_edits_db
from ade_tasks.db import rules as rules_db
from ade_tasks.db.engine import SessionFactory
from ade_tasks.db.occurrences import OccurrenceKey
from ade_tasks.db.schema import RunRow, ScheduleOccurrenceRow
from ade_tasks.errors import AdmissionError, InvalidInputError, NotFoundError
from ade_tasks.schedule.backfill import (
    MAX_SLOTS,
    BackfillReport,
    BackfillRequest,
    SlotResult,
    backfill,
    slots_in_range,
)
from ade_tasks.states import OccurrenceOutcome
from ade_tasks.testing import InMemorySender
from tests.unit.conftest import add_rule

NOW = datetime(2026, 11, 30, 12, 0, 30, tzinfo=UTC)
HOURLY = """
id: hourly
triggers: [{type: schedule, cron: "0 * * * *"}, {type: manual}]
guardrails: {overlap: allow-all}
execution: {kind: built-in, actions: [{type: run-command, command: "true"}]}
"""


def at(hour: int, minute: int = 0, day: int = 30) -> datetime:
    return datetime(2026, 11, day, hour, minute, tzinfo=UTC)


@pytest.fixture
def hourly(session_factory: SessionFactory, rules_dir: Path) -> None:
    add_rule(session_factory, rules_dir, "hourly", HOURLY)


def run_backfill(
    session_factory: SessionFactory,
    sender: InMemorySender,
    start: datetime,
    end: datetime,
    rule_id: str = "hourly",
    **options: object,
) -> BackfillReport:
    disabled = bool(options.pop("automations_disabled", False))
    request = BackfillRequest(rule_id, start, end, "ana", **options)  # type: ignore[arg-type]
    return backfill(session_factory, sender, request, now=NOW, automations_disabled=disabled)


def results(report: BackfillReport) -> list[tuple[str, str]]:
    return [(f"{s.key.slot:%H:%M}", s.result.value) for s in report.slots]


def record(session_factory: SessionFactory, slot: datetime, outcome: OccurrenceOutcome) -> None:
    """An occurrence as a beat recorded it (no run)."""
    key = OccurrenceKey("hourly", 0, "0 * * * *", slot)
    with session_factory.begin() as session:
        occ_db.claim(session, [key], "beat-1", outcome)
        if outcome == OccurrenceOutcome.SKIPPED:
            reason = "rule 'hourly' is paused by bob: freeze"
            occ_db.record_outcomes(session, [occ_db.Outcome(key, outcome, None, reason)])


def run_count(session_factory: SessionFactory) -> int:
    with session_factory() as session:
        return int(session.scalar(select(func.count()).select_from(RunRow)) or 0)


def outcomes(session_factory: SessionFactory) -> dict[str, str]:
    with session_factory() as session:
        rows = session.scalars(select(ScheduleOccurrenceRow)).all()
        return {f"{r.slot:%H:%M}": r.outcome for r in rows}


# --- slot math --------------------------------------------------------------------------------


def test_slots_are_from_inclusive_to_exclusive_in_the_triggers_zone_across_a_dst_change(
    session_factory: SessionFactory, rules_dir: Path
) -> None:
    add_rule(session_factory, rules_dir, "berlin", """
        id: berlin
        triggers: [{type: schedule, cron: "30 3 * * *", timezone: Europe/Berlin}]
        execution: {kind: built-in, actions: [{type: run-command, command: "true"}]}
        """)  # fmt: skip
    with session_factory() as session:
        rule = rules_db.load_rule(rules_db.get_rule(session, "berlin"))
    # 03:30 Berlin is 02:30 UTC in winter and 01:30 UTC after the spring change of 29 March.
    start = datetime(2026, 3, 28, 2, 30, tzinfo=UTC)
    end = datetime(2026, 3, 31, 1, 30, tzinfo=UTC)

    slots = [key.slot for key in slots_in_range(rule, start, end)]

    assert slots == [
        datetime(2026, 3, 28, 2, 30, tzinfo=UTC),  # exactly `from`: included
        datetime(2026, 3, 29, 1, 30, tzinfo=UTC),
        datetime(2026, 3, 30, 1, 30, tzinfo=UTC),
    ]  # 31 March 01:30 is exactly `to`: excluded


# --- outcomes -----------------------------------------------------------------------------


def test_never_claimed_and_missed_slots_fire_once_and_fired_ones_are_reported(
    session_factory: SessionFactory, sender: InMemorySender, hourly: None
) -> None:
    record(session_factory, at(9), OccurrenceOutcome.MISSED)

    first = run_backfill(session_factory, sender, at(8), at(11))
    again = run_backfill(session_factory, sender, at(8), at(11))

    assert results(first) == [("08:00", "fired"), ("09:00", "fired"), ("10:00", "fired")]
    assert [s.was for s in first.slots] == [None, "missed", None]
    assert "was missed" in first.slots[1].detail
    assert results(again) == [(h, "already-fired") for h in ("08:00", "09:00", "10:00")]
    assert again.slots[1].run_id == first.slots[1].run_id
    assert "already fired by run" in again.slots[1].detail
    assert "backfill by ana" in again.slots[1].detail
    assert run_count(session_factory) == 3 and len(sender.sent) == 3
    assert outcomes(session_factory) == {"08:00": "fired", "09:00": "fired", "10:00": "fired"}
    assert first.summary.endswith("3 slot(s): 3 fired")
    with session_factory() as session:
        trigger = session.scalars(select(RunRow.trigger)).first()
    assert trigger is not None and trigger["backfill_by"] == "ana"


def test_a_slot_skipped_before_any_run_is_fired_only_when_asked(
    session_factory: SessionFactory, sender: InMemorySender, hourly: None
) -> None:
    record(session_factory, at(9), OccurrenceOutcome.SKIPPED)

    kept = run_backfill(session_factory, sender, at(9), at(10))
    fired = run_backfill(session_factory, sender, at(9), at(10), include_skipped=True)

    assert results(kept) == [("09:00", "already-skipped")]
    assert "paused by bob: freeze" in kept.slots[0].detail
    assert "--include-skipped" in kept.slots[0].detail
    assert results(fired) == [("09:00", "fired")] and fired.slots[0].was == "skipped"
    assert run_count(session_factory) == 1


def test_a_slot_claimed_but_not_recorded_is_reported_in_progress(
    session_factory: SessionFactory, sender: InMemorySender, hourly: None
) -> None:
    record(session_factory, at(9), OccurrenceOutcome.CLAIMED)

    report = run_backfill(session_factory, sender, at(9), at(10))

    assert results(report) == [("09:00", "in-progress")]
    assert "claimed by beat-1" in report.slots[0].detail
    assert run_count(session_factory) == 0


def test_the_overlap_policy_skip_skips_later_slots_while_the_first_runs_and_says_so(
    session_factory: SessionFactory, sender: InMemorySender, rules_dir: Path
) -> None:
    add_rule(session_factory, rules_dir, "hourly", HOURLY.replace("allow-all", "skip"))

    report = run_backfill(session_factory, sender, at(8), at(11))

    assert results(report) == [("08:00", "fired"), ("09:00", "skipped"), ("10:00", "skipped")]
    skipped = report.slots[1]
    assert skipped.run_id is not None
    assert "skipped by the overlap policy skip: 1 run(s) of rule 'hourly' are active" in (
        skipped.detail
    )
    assert outcomes(session_factory) == {"08:00": "fired", "09:00": "skipped", "10:00": "skipped"}
    assert len(sender.sent) == 1
    again = run_backfill(session_factory, sender, at(8), at(11))
    assert results(again)[1] == ("09:00", "already-skipped")
    assert "start a manual run" in again.slots[1].detail


def test_under_buffer_all_the_backfilled_slots_queue_behind_the_first(
    session_factory: SessionFactory, sender: InMemorySender, rules_dir: Path
) -> None:
    add_rule(session_factory, rules_dir, "hourly", HOURLY.replace("allow-all", "buffer-all"))

    report = run_backfill(session_factory, sender, at(8), at(11))

    assert [s.result for s in report.slots] == [SlotResult.FIRED] * 3
    assert [("buffered" in s.detail) for s in report.slots] == [False, True, True]
    assert len(sender.sent) == 1


def test_a_dry_run_explains_and_claims_nothing(
    session_factory: SessionFactory, sender: InMemorySender, hourly: None
) -> None:
    record(session_factory, at(9), OccurrenceOutcome.MISSED)
    run_backfill(session_factory, sender, at(10), at(11))

    report = run_backfill(session_factory, sender, at(8), at(11), dry_run=True)

    assert results(report) == [
        ("08:00", "would-fire"),
        ("09:00", "would-fire"),
        ("10:00", "already-fired"),
    ]
    assert "never claimed" in report.slots[0].detail and "was missed" in report.slots[1].detail
    assert "dry run" in report.summary
    assert outcomes(session_factory) == {"09:00": "missed", "10:00": "fired"}
    assert run_count(session_factory) == 1


def test_a_paused_trigger_leaves_its_slots_unclaimed_and_says_why(
    session_factory: SessionFactory, sender: InMemorySender, hourly: None
) -> None:
    with session_factory.begin() as session:
        pauses_db.pause(session, "hourly", 0, "db migration", "bob")

    report = run_backfill(session_factory, sender, at(8), at(10))

    assert results(report) == [("08:00", "paused"), ("09:00", "paused")]
    assert "db migration" in report.slots[0].detail
    assert outcomes(session_factory) == {}


def test_the_kill_switch_refuses_a_backfill_unless_an_admin_forced_it(
    session_factory: SessionFactory, sender: InMemorySender, hourly: None
) -> None:
    with pytest.raises(AdmissionError, match=r"ADE_DISABLE_AUTOMATIONS=1.*--force"):
        run_backfill(session_factory, sender, at(8), at(9), automations_disabled=True)
    assert outcomes(session_factory) == {}

    forced = run_backfill(
        session_factory, sender, at(8), at(9), automations_disabled=True, forced_by="root"
    )

    assert results(forced) == [("08:00", "fired")]
    with session_factory() as session:
        trigger = session.scalars(select(RunRow.trigger)).one()
    assert trigger["forced_by"] == "root"


# --- bad input ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("start", "end", "message"),
    [
        (datetime(2026, 11, 30, 8), at(9), r"^from: 2026-11-30T08:00:00 has no time zone"),
        (at(8), datetime(2026, 11, 30, 9), r"^to: 2026-11-30T09:00:00 has no time zone"),
        (at(9), at(9), r"^from: .* is not before to"),
        (at(10), at(9), r"^from: .* is not before to"),
        (at(8), at(13), r"^to: .* is in the future .* belong to the beats"),
        (NOW - timedelta(days=36), at(9), r"^from: .* more than 35 days ago"),
    ],
)
def test_a_bad_range_is_refused_with_the_field(
    session_factory: SessionFactory,
    sender: InMemorySender,
    hourly: None,
    start: datetime,
    end: datetime,
    message: str,
) -> None:
    with pytest.raises(InvalidInputError, match=message):
        run_backfill(session_factory, sender, start, end)
    assert outcomes(session_factory) == {}


def test_a_range_of_more_than_the_bound_is_refused_with_where_to_split(
    session_factory: SessionFactory, sender: InMemorySender, rules_dir: Path
) -> None:
    add_rule(session_factory, rules_dir, "hourly", HOURLY.replace("0 * * * *", "* * * * *"))
    start = at(12) - timedelta(minutes=MAX_SLOTS + 1)
    split = start + timedelta(minutes=MAX_SLOTS)

    with pytest.raises(InvalidInputError, match=r"^from/to: the range holds more than 1000") as e:
        run_backfill(session_factory, sender, start, at(12))

    assert f"from {start.isoformat()} to {split.isoformat()}, then from {split.isoformat()}" in (
        e.value.message
    )
    exactly = run_backfill(session_factory, sender, start + timedelta(minutes=1), at(12))
    assert len(exactly.slots) == MAX_SLOTS


def test_a_rule_without_cron_triggers_is_refused_naming_its_triggers(
    session_factory: SessionFactory, sender: InMemorySender, rules_dir: Path
) -> None:
    add_rule(session_factory, rules_dir, "manual", """
        id: manual-only
        triggers: [{type: manual}]
        execution: {kind: built-in, actions: [{type: run-command, command: "true"}]}
        """)  # fmt: skip
    with pytest.raises(InvalidInputError, match=r"no cron schedule trigger \(triggers: manual\)"):
        run_backfill(session_factory, sender, at(8), at(9), rule_id="manual-only")


def test_an_unknown_rule_is_not_found(
    session_factory: SessionFactory, sender: InMemorySender
) -> None:
    with pytest.raises(NotFoundError, match="rule 'nope' does not exist"):
        run_backfill(session_factory, sender, at(8), at(9), rule_id="nope")


def test_a_disabled_rule_is_refused_with_how_to_enable_it(
    session_factory: SessionFactory, sender: InMemorySender, hourly: None
) -> None:
    with session_factory.begin() as session:
        rule_edits_db.set_enabled(session, "hourly", False)
    with pytest.raises(AdmissionError, match=r"is disabled.*ade-tasks rules enable hourly"):
        run_backfill(session_factory, sender, at(8), at(9))


def test_a_paused_rule_is_refused_with_the_note(
    session_factory: SessionFactory, sender: InMemorySender, hourly: None
) -> None:
    with session_factory.begin() as session:
        pauses_db.pause(session, "hourly", None, "freeze until Monday", "bob")
    with pytest.raises(AdmissionError, match=r"not backfilled: .*freeze until Monday"):
        run_backfill(session_factory, sender, at(8), at(9))
    assert outcomes(session_factory) == {}
