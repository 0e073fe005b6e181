"""Matching an ingress event on SQLite: bounded in time, a poison event is failed after a bound
instead of being handed from worker to worker forever, and a database error leaves the event
retryable instead of failed."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.exc import OperationalError

from ade_tasks.clock import utcnow
from ade_tasks.db import ingress as ingress_db
from ade_tasks.db import rule_triggers
from ade_tasks.db.engine import SessionFactory
from ade_tasks.db.schema import IngressEventRow, RuleRow, RunRow
from ade_tasks.ingress import intake
from ade_tasks.ingress.github import normalize
from ade_tasks.runs.recovery import recover
from ade_tasks.settings import Settings
from ade_tasks.states import IngressStatus
from ade_tasks.testing import InMemorySender
from ade_tasks.triggers.ingress_events import (
    EventDeferredError,
    is_database_error,
    match_ingress_event,
)
from ade_workers.celery.app import create_celery_app
from tests.fixtures import GITHUB_FIXTURES
from tests.unit.conftest import add_rule

OPENED = "{type: github.pr_opened, repo: Codertocat/Hello-World}"


def rule(rule_id: str, trigger: str) -> str:
    return (
        f"id: {rule_id}\ntriggers: [{trigger}]\n"
        "execution: {kind: built-in, actions: [{type: run-command, command: 'true'}]}\n"
    )


def store_pr(
    session_factory: SessionFactory, sender: InMemorySender, delivery: str, **changes: Any
) -> int:
    payload = json.loads((GITHUB_FIXTURES / "pull_request/opened.payload.json").read_bytes())
    payload["pull_request"].update(changes)
    event = normalize("pull_request", delivery, payload)
    row = intake.event_row(
        source="github",
        delivery_id=delivery,
        event=event,
        event_key=event.event_key,
        payload=event.to_payload(),
        digest=delivery,
    )
    event_id = intake.store_event(session_factory, sender, row).event_id
    assert event_id is not None
    return event_id


def event_of(session_factory: SessionFactory, event_id: int) -> IngressEventRow:
    with session_factory() as session:
        row = ingress_db.get_event(session, event_id)
        assert row is not None
        session.expunge(row)
        return row


def run_rules(session_factory: SessionFactory) -> list[str]:
    with session_factory() as session:
        return list(session.scalars(select(RunRow.rule_id).order_by(RunRow.rule_id)))


def ticking(step: float) -> Iterator[float]:
    now = 0.0
    while True:
        yield now
        now += step


# --- the time bound --------------------------------------------------------------------------


def test_an_event_whose_matching_exceeds_its_bound_is_failed_with_the_reason(
    session_factory: SessionFactory, sender: InMemorySender, rules_dir: Path
) -> None:
    for n in range(5):
        add_rule(session_factory, rules_dir, f"r{n}.yaml", rule(f"r{n}", OPENED))
    event_id = store_pr(session_factory, sender, "slow")
    clock = ticking(4.0)  # every trigger check appears to take 4 s

    status = match_ingress_event(
        session_factory, sender, event_id, deadline=10.0, clock=lambda: next(clock)
    )

    row = event_of(session_factory, event_id)
    assert status == IngressStatus.FAILED and row.status == IngressStatus.FAILED
    assert row.error is not None
    assert row.error.startswith("matching exceeded its time bound of 10 s")
    assert "after 2 trigger(s)" in row.error and "no rule was started" in row.error
    assert run_rules(session_factory) == []  # all or nothing


def test_a_body_too_long_for_a_regex_filter_fails_the_event_saying_so(
    session_factory: SessionFactory, sender: InMemorySender, rules_dir: Path
) -> None:
    trigger = "{type: github.pr_opened, body_regex: x}"
    add_rule(session_factory, rules_dir, "b.yaml", rule("b", trigger))
    event_id = store_pr(session_factory, sender, "huge", body="y" * 200_000)

    status = match_ingress_event(session_factory, sender, event_id)

    row = event_of(session_factory, event_id)
    assert status == IngressStatus.FAILED
    assert row.error is not None and "body_regex 'x' cannot search the event's body" in row.error
    assert "200,000 characters long; a rule regex searches at most 131,072" in row.error


# --- poison ----------------------------------------------------------------------------------


def test_an_event_whose_workers_all_died_is_failed_not_resent_forever(
    session_factory: SessionFactory, sender: InMemorySender, rules_dir: Path
) -> None:
    add_rule(session_factory, rules_dir, "r.yaml", rule("r", "{type: github.pr_opened}"))
    event_id = store_pr(session_factory, sender, "poison")
    long_ago = utcnow() - timedelta(hours=1)
    for attempt in range(ingress_db.MAX_ATTEMPTS):  # each worker claimed it, then died
        with session_factory.begin() as session:
            at = long_ago + attempt * 2 * ingress_db.CLAIM_HOLD
            assert ingress_db.claim_event(session, event_id, at) is not None

    status = match_ingress_event(session_factory, sender, event_id)
    with session_factory() as session:
        waiting = ingress_db.unprocessed_events(session, timedelta(0))

    row = event_of(session_factory, event_id)
    assert status == IngressStatus.FAILED
    assert row.error is not None and row.error.startswith(
        "not matched: 3 workers started matching this event and none finished"
    )
    assert run_rules(session_factory) == [] and waiting == []


def test_a_second_message_for_an_event_being_matched_does_nothing(
    session_factory: SessionFactory, sender: InMemorySender, rules_dir: Path
) -> None:
    add_rule(session_factory, rules_dir, "r.yaml", rule("r", "{type: github.pr_opened}"))
    event_id = store_pr(session_factory, sender, "twice")
    with session_factory.begin() as session:  # another worker is matching it right now
        assert ingress_db.claim_event(session, event_id, utcnow()) is not None

    assert match_ingress_event(session_factory, sender, event_id) is None
    assert event_of(session_factory, event_id).status == IngressStatus.RECEIVED


# --- database errors -------------------------------------------------------------------------


def test_an_event_the_database_failed_under_stays_received_and_is_matched_later(
    session_factory: SessionFactory,
    sender: InMemorySender,
    rules_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    add_rule(session_factory, rules_dir, "r.yaml", rule("r", OPENED))
    event_id = store_pr(session_factory, sender, "blip")
    trigger_candidates = rule_triggers.trigger_candidates

    def terminated(session: Any, trigger_type: str, keys: Any = None) -> Any:
        # what pg_terminate_backend does to the statement
        raise OperationalError(
            "SELECT rules", {}, Exception("terminating connection due to administrator command")
        )

    monkeypatch.setattr(rule_triggers, "trigger_candidates", terminated)
    with pytest.raises(EventDeferredError, match="stays received"):
        match_ingress_event(session_factory, sender, event_id)
    deferred = event_of(session_factory, event_id)
    monkeypatch.setattr(rule_triggers, "trigger_candidates", trigger_candidates)
    report = recover(session_factory, sender, requeue_after=timedelta(0))
    status = match_ingress_event(session_factory, sender, event_id)

    assert (deferred.status, deferred.error, deferred.attempts) == ("received", None, 0)
    assert event_id in report.resent_events  # the sweep re-sends it
    assert status == IngressStatus.DISPATCHED and run_rules(session_factory) == ["r"]


def test_the_ingress_task_leaves_a_deferred_event_for_the_sweep_and_goes_on(
    session_factory: SessionFactory,
    sender: InMemorySender,
    rules_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    add_rule(session_factory, rules_dir, "r.yaml", rule("r", OPENED))
    first, broken, last = (store_pr(session_factory, sender, f"batch-{n}") for n in range(3))
    claim_event = ingress_db.claim_event

    def flaky(session: Any, event_id: int, now: Any) -> Any:
        if event_id == broken:  # the database went away for this one claim
            raise OperationalError("UPDATE", {}, Exception("server closed the connection"))
        return claim_event(session, event_id, now)

    monkeypatch.setattr(ingress_db, "claim_event", flaky)
    app = create_celery_app(Settings(), session_factory=session_factory)
    app.ade_runtime.sender = sender
    statuses = app.tasks["ade.ingress.dispatch"].run(first, broken, last)

    assert statuses == ["dispatched", None, "dispatched"]
    assert event_of(session_factory, broken).status == IngressStatus.RECEIVED


@pytest.mark.parametrize(
    ("error", "database"),
    [
        (OperationalError("SELECT 1", {}, Exception("server closed the connection")), True),
        (type("OperationalError", (Exception,), {"__module__": "psycopg"})("gone"), True),
        (ValueError("a rule's filter is wrong"), False),
        (KeyError("number"), False),
    ],
)
def test_database_errors_are_told_from_matching_failures(error: Exception, database: bool) -> None:
    wrapped = RuntimeError("dispatch failed")
    wrapped.__cause__ = error

    assert is_database_error(error) is database
    assert is_database_error(wrapped) is database


def test_a_stored_rule_that_no_longer_reads_back_does_not_stop_the_others(
    session_factory: SessionFactory, sender: InMemorySender, rules_dir: Path
) -> None:
    add_rule(session_factory, rules_dir, "r.yaml", rule("r", OPENED))
    add_rule(session_factory, rules_dir, "legacy.yaml", rule("legacy", OPENED))
    with session_factory.begin() as session:  # stored by a version that took a lookahead
        row = session.get(RuleRow, "legacy")
        assert row is not None
        steps = [{"type": "run-command", "command": "true", "condition": "x matches '(?=a)'"}]
        document = {**row.document, "execution": {"kind": "built-in", "actions": steps}}
        row.document, row.content_hash = document, "stored-before-re2"
    event_id = store_pr(session_factory, sender, "legacy")

    status = match_ingress_event(session_factory, sender, event_id)

    assert status == IngressStatus.DISPATCHED and run_rules(session_factory) == ["r"]
