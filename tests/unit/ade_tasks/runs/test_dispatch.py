"""Dispatch: admission, one row per idempotency key, send after commit, nothing lost when the broker is down."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from ade_tasks.clock import utcnow
from ade_tasks.db import run_steps as run_steps_db
from ade_tasks.db import run_views as run_views_db
from ade_tasks.db import runs as runs_db
from ade_tasks.db.engine import SessionFactory
from ade_tasks.errors import AdmissionError, InvalidInputError, NotFoundError
from ade_tasks.runs.dispatch import dispatch, dispatch_many
from ade_tasks.runs.dispatch_results import DispatchResult
from ade_tasks.runs.recovery import recover
from ade_tasks.runs.trigger_events import TriggerEvent
from ade_tasks.states import RunStatus
from ade_tasks.testing import InMemorySender
from tests.unit.conftest import add_rule

RULE = """
    id: {id}
    enabled: {enabled}
    triggers: [{{type: manual}}, {{type: webhook, hook: ci}}]
    inputs:
      target: {{type: choice, options: [unit, all], default: unit}}
      verbose: {{type: boolean}}
    execution:
      kind: built-in
      queue: custom.q
      actions: [{{type: run-command, command: "true"}}]
"""


@pytest.fixture
def rules(session_factory: SessionFactory, rules_dir: Path) -> None:
    add_rule(session_factory, rules_dir, "alpha", RULE.format(id="alpha", enabled="true"))
    add_rule(session_factory, rules_dir, "beta", RULE.format(id="beta", enabled="false"))


def test_manual_dispatch_records_a_queued_run_then_sends_only_its_id(
    session_factory: SessionFactory, sender: InMemorySender, rules: None
) -> None:
    result = dispatch(session_factory, sender, "alpha", TriggerEvent.manual({"verbose": "yes"}))
    assert result.created and result.sent
    assert sender.sent == [(result.run.id, "custom.q", "alpha")]
    with session_factory() as session:
        row = runs_db.get_run(session, result.run.id)
        assert row.status == RunStatus.QUEUED
        assert row.trigger["inputs"] == {"target": "unit", "verbose": True}
        assert row.billing_code == "auto:alpha" and row.rule_version == 1


def test_same_idempotency_key_returns_the_existing_run_and_sends_nothing(
    session_factory: SessionFactory, sender: InMemorySender, rules: None
) -> None:
    first = dispatch(session_factory, sender, "alpha", TriggerEvent.manual(key="req-1"))
    second = dispatch(session_factory, sender, "alpha", TriggerEvent.manual(key="req-1"))
    assert second.run.id == first.run.id and not second.created and not second.sent
    assert len(sender.sent) == 1


def test_disabled_rule_refuses_automatic_triggers_but_runs_manually(
    session_factory: SessionFactory, sender: InMemorySender, rules: None
) -> None:
    with pytest.raises(AdmissionError, match="rule 'beta' is disabled"):
        dispatch(session_factory, sender, "beta", TriggerEvent("webhook", "ci ping"))
    assert dispatch(session_factory, sender, "beta", TriggerEvent.manual()).created
    with session_factory() as session:
        page, _ = run_views_db.list_runs(session, run_views_db.RunFilter(rule_id="beta"))
    assert [r.trigger_type for r in page] == ["manual"]


def test_unknown_rule_is_not_found(session_factory: SessionFactory, sender: InMemorySender) -> None:
    with pytest.raises(NotFoundError, match="rule 'nope' does not exist"):
        dispatch(session_factory, sender, "nope", TriggerEvent.manual())
    assert sender.sent == []


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        ({"target": "some"}, "input 'target' must be one of unit, all"),
        ({"verbose": "maybe"}, "input 'verbose' must be a boolean"),
        ({"colour": "red"}, "has no input named 'colour'"),
    ],
)
def test_bad_inputs_are_refused_before_anything_is_recorded(
    session_factory: SessionFactory,
    sender: InMemorySender,
    rules: None,
    inputs: dict[str, str],
    message: str,
) -> None:
    with pytest.raises(InvalidInputError, match=message):
        dispatch(session_factory, sender, "alpha", TriggerEvent.manual(inputs))
    with session_factory() as session:
        assert run_views_db.list_runs(session, run_views_db.RunFilter())[0] == []


def test_broker_down_keeps_the_run_queued_and_the_sweep_sends_it_later(
    session_factory: SessionFactory, sender: InMemorySender, rules: None
) -> None:
    sender.down = True
    result = dispatch(session_factory, sender, "alpha", TriggerEvent.manual())
    assert result.created and not result.sent and "marked down" in (result.send_error or "")
    # Within the bound the sweep leaves it alone (its message may still be in flight) ...
    assert recover(session_factory, sender, requeue_after=timedelta(minutes=5)).resent == []
    # ... past it, and with the broker back, the sweep sends it exactly once.
    sender.down = False
    assert recover(session_factory, sender, requeue_after=timedelta(0)).resent == [result.run.id]
    assert sender.sent == [(result.run.id, "custom.q", "alpha")]
    with session_factory() as session:
        assert runs_db.get_run(session, result.run.id).send_count == 2


def test_a_claimed_run_cannot_be_claimed_again(
    session_factory: SessionFactory, sender: InMemorySender, rules: None
) -> None:
    run_id = dispatch(session_factory, sender, "alpha", TriggerEvent.manual()).run.id
    lease = utcnow() + timedelta(seconds=30)
    with session_factory.begin() as session:
        assert runs_db.claim_run(session, run_id, "w1", lease) is not None
    with session_factory.begin() as session:
        assert runs_db.claim_run(session, run_id, "w2", lease) is None
        assert runs_db.get_run(session, run_id).worker == "w1"


def test_expired_lease_queues_the_run_again_for_another_worker(
    session_factory: SessionFactory, sender: InMemorySender, rules: None
) -> None:
    run_id = dispatch(session_factory, sender, "alpha", TriggerEvent.manual()).run.id
    with session_factory.begin() as session:
        runs_db.claim_run(session, run_id, "w1", utcnow() - timedelta(seconds=1))
        run_steps_db.announce_step(
            session, run_steps_db.StepRecord(run_id, 0, "s", "run-command", utcnow())
        )
    report = recover(session_factory, sender, requeue_after=timedelta(minutes=1))
    assert (report.resumed, report.failed) == ([run_id], [])
    with session_factory() as session:
        run = runs_db.get_run(session, run_id)
        assert (run.status, run.worker, run.error) == (RunStatus.QUEUED, None, None)
        # The interrupted step stays for the next attempt to decide on.
        assert [s.status for s in run_steps_db.list_steps(session, run_id)] == ["running"]
        # The worker that lost its lease can no longer record an outcome.
    with session_factory.begin() as session:
        assert not runs_db.finish_run(session, run_id, "w1", RunStatus.SUCCEEDED)


def test_a_step_is_shown_running_only_while_its_run_is(
    session_factory: SessionFactory, sender: InMemorySender, rules: None
) -> None:
    # A run cancelled between its step's start and the step's announcement keeps no
    # `running` step behind.
    run_id = dispatch(session_factory, sender, "alpha", TriggerEvent.manual()).run.id
    step = run_steps_db.StepRecord(run_id, 0, "s", "run-command", utcnow())
    with session_factory.begin() as session:
        run_steps_db.announce_step(session, step)  # queued, not running: nothing to show
        assert run_steps_db.list_steps(session, run_id) == []
        runs_db.claim_run(session, run_id, "w1", utcnow() + timedelta(seconds=30))
        run_steps_db.announce_step(session, step)
        assert [s.status for s in run_steps_db.list_steps(session, run_id)] == ["running"]


def test_run_history_pages_newest_first_with_a_cursor(
    session_factory: SessionFactory, sender: InMemorySender, rules: None
) -> None:
    ids = [
        dispatch(session_factory, sender, "alpha", TriggerEvent.manual()).run.id for _ in range(5)
    ]
    seen: list[str] = []
    cursor = None
    with session_factory() as session:
        while True:
            page, cursor = run_views_db.list_runs(
                session, run_views_db.RunFilter(), limit=2, cursor=cursor
            )
            seen += [r.id for r in page]
            if cursor is None:
                break
    assert seen == list(reversed(ids))


def test_a_batch_dispatches_each_trigger_as_dispatch_would_one_result_each(
    session_factory: SessionFactory, sender: InMemorySender, rules_dir: Path, rules: None
) -> None:
    add_rule(session_factory, rules_dir, "solo", """
        id: solo
        triggers: [{type: manual}]
        guardrails: {overlap: skip}
        execution: {kind: built-in, actions: [{type: run-command, command: "true"}]}
    """)  # fmt: skip
    earlier = dispatch(session_factory, sender, "alpha", TriggerEvent.manual(key="seen"))
    webhook = TriggerEvent("webhook", "ci", {}, "hook-1")

    results = dispatch_many(
        session_factory,
        sender,
        [
            ("alpha", TriggerEvent.manual(key="new")),
            ("alpha", TriggerEvent.manual(key="seen")),  # a retry
            ("nope", TriggerEvent.manual()),  # no such rule
            ("beta", webhook),  # disabled
            ("solo", TriggerEvent.manual(key="s1")),
            ("solo", TriggerEvent.manual(key="s2")),  # the first took solo's only slot
        ],
    )

    new, retry, missing, disabled, first, second = results
    assert isinstance(new, DispatchResult) and new.created and new.sent
    assert isinstance(retry, DispatchResult) and retry.run.id == earlier.run.id
    assert not retry.created
    assert isinstance(missing, NotFoundError) and isinstance(disabled, AdmissionError)
    assert isinstance(first, DispatchResult) and first.run.status == RunStatus.QUEUED
    assert isinstance(second, DispatchResult) and second.run.status == RunStatus.SKIPPED
    assert "overlap policy skip" in (second.run.error or "")
    assert [run_id for run_id, _, _ in sender.sent] == [earlier.run.id, new.run.id, first.run.id]
