"""Overlap policies and max_concurrent, enforced in dispatch for every trigger type."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from ade_tasks.clock import utcnow
from ade_tasks.db import run_events as run_events_db
from ade_tasks.db import run_recovery as run_recovery_db
from ade_tasks.db import runs as runs_db
from ade_tasks.db.engine import SessionFactory
from ade_tasks.runs.dispatch import dispatch, dispatch_many
from ade_tasks.runs.dispatch_results import DispatchResult
from ade_tasks.runs.recovery import recover
from ade_tasks.runs.trigger_events import TriggerEvent
from ade_tasks.settings import Settings
from ade_tasks.states import RunStatus
from ade_tasks.testing import InMemorySender
from ade_workers.actions.registry import registry
from ade_workers.engine.runner import execute_run
from ade_workers.engine.runner_config import RunnerConfig
from tests.unit.conftest import add_rule


def rule(session_factory: SessionFactory, rules_dir: Path, guardrails: str) -> None:
    add_rule(
        session_factory,
        rules_dir,
        "busy",
        "id: busy\n"
        "triggers: [{type: manual}, {type: webhook, hook: ci}]\n"
        "execution: {kind: built-in, actions: [{type: run-command, command: 'true'}]}\n"
        f"guardrails: {guardrails}\n",
    )


def trigger(sender: InMemorySender, session_factory: SessionFactory, kind: str = "webhook") -> str:
    event = TriggerEvent.manual() if kind == "manual" else TriggerEvent(kind, "a delivery")
    return dispatch(session_factory, sender, "busy", event).run.id


def status(session_factory: SessionFactory, run_id: str) -> tuple[str, bool, str | None]:
    with session_factory() as session:
        run = runs_db.get_run(session, run_id)
        return run.status, run.buffered, run.error


def start(session_factory: SessionFactory, run_id: str) -> None:
    with session_factory.begin() as session:
        assert runs_db.claim_run(session, run_id, "w", utcnow() + timedelta(minutes=1))


def test_allow_all_without_a_limit_runs_everything(
    session_factory: SessionFactory, rules_dir: Path, sender: InMemorySender
) -> None:
    rule(session_factory, rules_dir, "{}")
    ids = [trigger(sender, session_factory) for _ in range(3)]
    assert [status(session_factory, i)[0] for i in ids] == ["queued"] * 3
    assert len(sender.sent) == 3


def test_skip_records_the_trigger_as_skipped_with_the_reason(
    session_factory: SessionFactory, rules_dir: Path, sender: InMemorySender
) -> None:
    rule(session_factory, rules_dir, "{overlap: skip}")
    first = trigger(sender, session_factory)
    second = trigger(sender, session_factory, "manual")
    state, buffered, error = status(session_factory, second)
    assert (state, buffered) == ("skipped", False)
    assert (
        error == "skipped by the overlap policy skip: 1 run(s) of rule 'busy' are active (limit 1)"
    )
    assert [sent[0] for sent in sender.sent] == [first]


def test_buffer_one_holds_one_run_and_skips_the_rest(
    session_factory: SessionFactory, rules_dir: Path, sender: InMemorySender
) -> None:
    rule(session_factory, rules_dir, "{overlap: buffer-one}")
    first, second, third = (trigger(sender, session_factory) for _ in range(3))
    assert status(session_factory, second)[:2] == ("queued", True)
    assert status(session_factory, third)[0] == "skipped"
    assert "one is buffered" in (status(session_factory, third)[2] or "")
    assert [s[0] for s in sender.sent] == [first]


def test_buffer_all_releases_buffered_runs_one_by_one_as_runs_end(
    session_factory: SessionFactory, rules_dir: Path, sender: InMemorySender, tmp_path: Path
) -> None:
    rule(session_factory, rules_dir, "{overlap: buffer-all}")
    ids = [trigger(sender, session_factory) for _ in range(3)]
    assert [status(session_factory, i)[1] for i in ids] == [False, True, True]
    config = RunnerConfig(Settings(projects={"default": tmp_path}), registry(), {}, sender=sender)
    for n, run_id in enumerate(ids):
        assert execute_run(session_factory, config, run_id, "w") == RunStatus.SUCCEEDED
        assert [s[0] for s in sender.sent] == ids[: min(n + 2, 3)]
    assert [status(session_factory, i)[0] for i in ids] == ["succeeded"] * 3


def test_max_concurrent_limits_allow_all_and_buffers_the_excess(
    session_factory: SessionFactory, rules_dir: Path, sender: InMemorySender
) -> None:
    rule(session_factory, rules_dir, "{max_concurrent: 2}")
    ids = [trigger(sender, session_factory) for _ in range(3)]
    assert [status(session_factory, i)[1] for i in ids] == [False, False, True]


def test_cancel_other_cancels_the_active_run_and_starts_the_new_one(
    session_factory: SessionFactory, rules_dir: Path, sender: InMemorySender
) -> None:
    rule(session_factory, rules_dir, "{overlap: cancel-other}")
    first = trigger(sender, session_factory)
    start(session_factory, first)
    second = trigger(sender, session_factory)
    state, _, error = status(session_factory, first)
    assert state == "cancelled" and "cancel-other" in (error or "")
    assert status(session_factory, second)[0] == "queued"
    assert [s[0] for s in sender.sent] == [first, second]
    # The cancelled run's worker can no longer renew its lease or record an outcome.
    with session_factory.begin() as session:
        assert not runs_db.renew_lease(session, first, "w", utcnow())
        assert not runs_db.finish_run(session, first, "w", RunStatus.SUCCEEDED)


def test_schedules_skip_by_default_but_manual_runs_do_not(
    session_factory: SessionFactory, rules_dir: Path, sender: InMemorySender
) -> None:
    add_rule(
        session_factory,
        rules_dir,
        "busy",
        "id: busy\ntriggers: [{type: schedule, cron: '* * * * *'}]\n"
        "execution: {kind: built-in, actions: [{type: run-command, command: 'true'}]}\n",
    )
    payload = {"trigger_index": 0, "cron": "* * * * *"}
    first = dispatch(session_factory, sender, "busy", TriggerEvent("schedule", "", payload, "s1"))
    second = dispatch(session_factory, sender, "busy", TriggerEvent("schedule", "", payload, "s2"))
    manual = dispatch(session_factory, sender, "busy", TriggerEvent.manual())
    assert (first.run.status, second.run.status, manual.run.status) == (
        "queued",
        "skipped",
        "queued",
    )


def test_the_sweep_releases_buffered_runs_a_dead_worker_left_behind(
    session_factory: SessionFactory, rules_dir: Path, sender: InMemorySender
) -> None:
    rule(session_factory, rules_dir, "{overlap: buffer-all}")
    first, second = trigger(sender, session_factory), trigger(sender, session_factory)
    start(session_factory, first)
    with session_factory.begin() as session:  # its worker died; the lease ran out
        runs_db.renew_lease(session, first, "w", utcnow() - timedelta(seconds=1))
        for resume in range(run_recovery_db.MAX_WORKER_LOST_RESUMES):  # and not for the first time
            run_events_db.append_event(
                session, first, run_recovery_db.RESUMED_EVENT, {"resume": resume + 1}
            )
    report = recover(session_factory, sender, requeue_after=timedelta(minutes=5))
    assert report.failed == [first] and report.released == [second]
    assert status(session_factory, second)[:2] == ("queued", False)


def test_a_batch_of_several_rules_applies_each_rules_policy_to_its_own_active_runs(
    session_factory: SessionFactory, rules_dir: Path, sender: InMemorySender
) -> None:
    # Given four rules: two with a run active already (skip, buffer-one), two idle (buffer-all)
    for name, guardrails in (
        ("skips", "{overlap: skip}"),
        ("buffers", "{overlap: buffer-one}"),
        ("idle-a", "{overlap: buffer-all}"),
        ("idle-b", "{overlap: buffer-all}"),
    ):
        add_rule(
            session_factory,
            rules_dir,
            name,
            f"id: {name}\ntriggers: [{{type: webhook, hook: ci}}]\n"
            "execution: {kind: built-in, actions: [{type: run-command, command: 'true'}]}\n"
            f"guardrails: {guardrails}\n",
        )
    for name in ("skips", "buffers"):
        start(session_factory, dispatch(session_factory, sender, name, hook(name)).run.id)
    # When one batch triggers them all, the idle ones twice
    names = ["skips", "buffers", "idle-a", "idle-a", "idle-b", "idle-b"]
    results = dispatch_many(session_factory, sender, [(name, hook(name)) for name in names])
    # Then each rule's policy judged its own runs, the batch's own included
    runs = [result.run for result in results if isinstance(result, DispatchResult)]
    assert [(run.rule_id, run.status, run.buffered) for run in runs] == [
        ("skips", "skipped", False),
        ("buffers", "queued", True),
        ("idle-a", "queued", False),
        ("idle-a", "queued", True),
        ("idle-b", "queued", False),
        ("idle-b", "queued", True),
    ]
    stored = [status(session_factory, run.id) for run in runs]
    assert [(state, buffered) for state, buffered, _ in stored] == [
        (run.status, run.buffered) for run in runs
    ]
    assert "policy skip: 1 run(s) of rule 'skips' are active" in (stored[0][2] or "")
    assert [sent[0] for sent in sender.sent[2:]] == [runs[2].id, runs[4].id]


def hook(name: str) -> TriggerEvent:
    return TriggerEvent("webhook", f"a delivery for {name}")
