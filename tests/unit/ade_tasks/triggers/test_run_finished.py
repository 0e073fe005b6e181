"""`run.finished` triggers without services: validation, the matcher, the event a finished run
makes (the runner's fast path on SQLite with real subprocesses), the sweep that emits the
finishes the runner did not make, the chain-depth bound, and rule health."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, update

from ade_tasks.clock import utcnow
from ade_tasks.db import run_cancels
from ade_tasks.db import run_events as run_events_db
from ade_tasks.db.engine import SessionFactory
from ade_tasks.db.schema import RunRow
from ade_tasks.rules.loader import parse_rule
from ade_tasks.rules.rule import Rule
from ade_tasks.rules.triggers import RunFinishedTrigger
from ade_tasks.runs.dispatch import dispatch
from ade_tasks.runs.trigger_events import TriggerEvent
from ade_tasks.settings import Settings
from ade_tasks.testing import InMemorySender
from ade_tasks.triggers.finished_runs import (
    CATCH_UP,
    REFUSED,
    emit_run_finished,
    sweep_finished_runs,
)
from ade_tasks.triggers.health import LiveState, rule_health
from ade_tasks.triggers.run_finished import MAX_CHAIN_DEPTH, starts_on
from ade_workers.actions.registry import registry
from ade_workers.engine.runner import execute_run
from ade_workers.engine.runner_config import RunnerConfig
from tests.unit.conftest import add_rule

ACTIONS = {"kind": "built-in", "actions": [{"type": "run-command", "command": "true"}]}


def parsed(trigger: dict[str, Any], rule_id: str = "slow-suite") -> Rule | list[str]:
    result = parse_rule({"id": rule_id, "triggers": [trigger], "execution": ACTIONS}, "r.yaml")
    return result if isinstance(result, Rule) else [str(problem) for problem in result]


# --- validation -----------------------------------------------------------------------------


def test_a_trigger_names_one_rule_or_several_and_the_statuses_it_starts_on() -> None:
    one = parsed({"type": "run.finished", "rule": "fix", "status": "completed-clean"})
    several = parsed({"type": "run.finished", "rule": ["fix", "lint-*"], "status": ["failed"]})
    assert isinstance(one, Rule) and isinstance(several, Rule)
    assert one.triggers[0] == RunFinishedTrigger(
        type="run.finished", rule=["fix"], status=["completed-clean"]
    )
    assert several.triggers[0].rule == ["fix", "lint-*"]  # type: ignore[union-attr]


def test_an_unknown_status_is_refused_listing_the_valid_ones() -> None:
    (problem,) = parsed({"type": "run.finished", "rule": "fix", "status": ["done", "failed"]})
    assert "triggers.0.status: unknown run status 'done'" in problem
    for valid in ("succeeded", "failed", "cancelled", "timed_out", "skipped", "completed-clean",
                  "pending-review", "actionable-findings", "verification-required"):  # fmt: skip
        assert valid in problem
    assert "ignored" not in problem and "archived" not in problem


def test_a_trigger_without_a_rule_is_refused() -> None:
    assert parsed({"type": "run.finished", "status": ["failed"]}) == [
        "r.yaml:triggers.0.rule: required; add `rule:`"
    ]


@pytest.mark.parametrize("followed", ["slow-suite", "slow-*", ["fix", "*"]])
def test_a_rule_that_follows_itself_is_refused(followed: str | list[str]) -> None:
    (problem,) = parsed({"type": "run.finished", "rule": followed})
    assert "cannot follow its own rule" in problem and "'slow-suite'" in problem


# --- matching -------------------------------------------------------------------------------


def trigger(**fields: Any) -> RunFinishedTrigger:
    return RunFinishedTrigger(type="run.finished", **fields)


def finished(rule: str = "fix", status: str = "succeeded", queue: str | None = None) -> dict:
    return {"rule": rule, "status": status, "queue_status": queue}


def test_a_trigger_starts_on_its_rules_with_a_status_or_queue_status_it_names() -> None:
    clean = trigger(rule=["fix"], status=["completed-clean"])
    assert starts_on(clean, finished(queue="completed-clean"))
    assert not starts_on(clean, finished(queue="pending-review"))
    assert not starts_on(clean, finished(rule="fix-2", queue="completed-clean"))
    failed = trigger(rule=["fix-*"], status=["failed", "timed_out"])
    assert starts_on(failed, finished("fix-api", "timed_out"))
    assert not starts_on(failed, finished("fix", "failed"))  # `fix-*` needs the dash


def test_without_a_status_every_outcome_but_skipped_starts_it() -> None:
    anything = trigger(rule=["fix"])
    for status in ("succeeded", "failed", "cancelled", "timed_out"):
        assert starts_on(anything, finished(status=status))
    assert not starts_on(anything, finished(status="skipped"))
    assert starts_on(trigger(rule=["fix"], status=["skipped"]), finished(status="skipped"))


# --- the event ------------------------------------------------------------------------------


@pytest.fixture
def config(tmp_path: Path) -> RunnerConfig:
    project = tmp_path / "project"
    project.mkdir()
    settings = Settings(projects={"default": project}, heartbeat_seconds=0.2)
    return RunnerConfig(settings, registry(), {"PATH": os.environ["PATH"]}, sender=InMemorySender())


def follower(session_factory: SessionFactory, rules_dir: Path, text: str) -> None:
    """The rule `fix` (a manual rule that echoes, then runs the command in its input) and
    `slow-suite`, whose trigger is `text`."""
    add_rule(session_factory, rules_dir, "fix", """
        id: fix
        triggers: [{type: manual}]
        inputs: {command: {type: string, default: "true"}}
        execution:
          kind: built-in
          actions:
            - {id: patch, type: run-command, command: "echo patched"}
            - {id: check, type: run-command, command: "{{trigger.inputs.command}}"}
        """)  # fmt: skip
    add_rule(session_factory, rules_dir, "slow-suite", f"""
        id: slow-suite
        triggers: [{text}]
        execution: {{kind: built-in, actions: [{{type: run-command, command: "true"}}]}}
        """)  # fmt: skip


def run_fix(session_factory: SessionFactory, config: RunnerConfig, command: str = "true") -> str:
    event = TriggerEvent.manual({"command": command})
    run_id = dispatch(session_factory, InMemorySender(), "fix", event).run.id
    execute_run(session_factory, config, run_id, "test-worker")
    return run_id


def cancelled_fix(session_factory: SessionFactory) -> str:
    """A run of fix that an operator cancels while it is queued (no runner ever sees it)."""
    fix_id = dispatch(session_factory, InMemorySender(), "fix", TriggerEvent.manual()).run.id
    with session_factory.begin() as session:
        run_cancels.cancel_run(session, fix_id, "ops")
    return fix_id


def runs_of(session_factory: SessionFactory, rule_id: str) -> list[RunRow]:
    with session_factory() as session:
        return list(session.scalars(select(RunRow).where(RunRow.rule_id == rule_id)))


def test_a_clean_finish_starts_the_follower_at_once_with_the_finished_run_as_its_trigger(
    session_factory: SessionFactory, rules_dir: Path, config: RunnerConfig
) -> None:
    # Given slow-suite follows fix when it completes clean
    follower(session_factory, rules_dir, "{type: run.finished, rule: fix, status: [completed-clean]}")  # fmt: skip
    # When fix runs and succeeds
    fix_id = run_fix(session_factory, config)
    # Then slow-suite was started by the runner, carrying fix's summary and outputs
    (slow,) = runs_of(session_factory, "slow-suite")
    assert slow.trigger_type == "run.finished" and slow.status == "queued"
    assert slow.idempotency_key == f"run.finished:{fix_id}:slow-suite"
    assert slow.trigger["depth"] == 1
    run = slow.trigger["run"]
    assert run["id"] == fix_id and run["rule"] == "fix"
    assert (run["status"], run["queue_status"]) == ("succeeded", "completed-clean")
    patch = run["outputs"]["patch"]
    assert (patch["status"], patch["exit_code"], patch["output"]) == ("succeeded", 0, "patched\n")
    assert patch["result"]["cwd"]  # the step's result as `{{steps.patch.result}}` had it
    assert run["summary"].splitlines() == [
        f"rule fix · run {fix_id}: succeeded", "- patch: succeeded", "- check: succeeded"
    ]  # fmt: skip
    # When the finish is emitted again (a retried finish, the sweep passing it)
    again = emit_run_finished(session_factory, InMemorySender(), fix_id)
    # Then the same run is found, and no second one started
    assert again == [slow.id] and len(runs_of(session_factory, "slow-suite")) == 1


def test_a_failed_finish_does_not_start_a_follower_of_clean_runs(
    session_factory: SessionFactory, rules_dir: Path, config: RunnerConfig
) -> None:
    follower(session_factory, rules_dir, "{type: run.finished, rule: fix, status: [completed-clean]}")  # fmt: skip
    fix_id = run_fix(session_factory, config, command="false")
    assert runs_of(session_factory, "fix")[0].status == "failed"
    assert emit_run_finished(session_factory, InMemorySender(), fix_id) == []
    assert runs_of(session_factory, "slow-suite") == []


def test_the_sweep_emits_a_finish_the_runner_never_saw_once(
    session_factory: SessionFactory, rules_dir: Path
) -> None:
    # Given slow-suite follows cancelled runs of fix, and a run of fix that an operator
    # cancels while it is queued (no runner ever sees it)
    follower(session_factory, rules_dir, "{type: run.finished, rule: fix, status: [cancelled]}")
    now = utcnow()
    sweep_finished_runs(session_factory, InMemorySender(), now)  # the cursor starts here
    fix_id = cancelled_fix(session_factory)
    # When the sweep runs, and again a moment later (the run is still inside its window)
    sender = InMemorySender()
    first = sweep_finished_runs(session_factory, sender, now + timedelta(seconds=1))
    second = sweep_finished_runs(session_factory, sender, now + timedelta(seconds=2))
    # Then slow-suite started once, from the first pass
    (slow,) = runs_of(session_factory, "slow-suite")
    assert first == [slow.id] and second == []
    assert (slow.trigger["run"]["id"], slow.trigger["run"]["status"]) == (fix_id, "cancelled")
    assert [run_id for run_id, *_ in sender.sent] == [slow.id]


def test_the_sweep_starts_nothing_for_runs_finished_before_its_window(
    session_factory: SessionFactory, rules_dir: Path
) -> None:
    follower(session_factory, rules_dir, "{type: run.finished, rule: fix, status: [cancelled]}")
    cancelled_fix(session_factory)
    # A first sweep long after (a new cluster, a rule added later) does not replay history
    later = utcnow() + timedelta(hours=1)
    assert sweep_finished_runs(session_factory, InMemorySender(), later) == []


def test_the_sweep_reaches_back_at_most_its_catch_up_bound(
    session_factory: SessionFactory, rules_dir: Path
) -> None:
    follower(session_factory, rules_dir, "{type: run.finished, rule: fix, status: [cancelled]}")
    now = utcnow()
    sweep_finished_runs(session_factory, InMemorySender(), now)  # the cursor is stored
    cancelled_fix(session_factory)
    # Housekeeping comes back after longer than CATCH_UP: the old finish is not followed
    back = now + CATCH_UP + timedelta(minutes=2)
    assert sweep_finished_runs(session_factory, InMemorySender(), back) == []
    assert runs_of(session_factory, "slow-suite") == []


def test_a_chain_past_the_depth_limit_starts_nothing_and_says_why_once(
    session_factory: SessionFactory, rules_dir: Path, config: RunnerConfig
) -> None:
    # Given slow-suite follows fix, and a run of fix that is the last one a chain may start
    follower(session_factory, rules_dir, "{type: run.finished, rule: fix}")
    fix_id = run_fix(session_factory, config)
    (first,) = runs_of(session_factory, "slow-suite")
    with session_factory.begin() as session:  # as if fix had been started by a deep chain
        deep = {"event": "run.finished", "depth": MAX_CHAIN_DEPTH, "run": {}}
        session.execute(
            update(RunRow)
            .where(RunRow.id == fix_id)
            .values(trigger_type="run.finished", trigger=deep, idempotency_key="deep")
        )
        session.execute(update(RunRow).where(RunRow.id == first.id).values(idempotency_key="x"))
    # When its finish is emitted (twice)
    assert emit_run_finished(session_factory, InMemorySender(), fix_id) == []
    assert emit_run_finished(session_factory, InMemorySender(), fix_id) == []
    # Then no follower starts, and the finished run's transcript says why, once
    assert [run.id for run in runs_of(session_factory, "slow-suite")] == [first.id]
    with session_factory() as session:
        (refusal,) = run_events_db.events_of(session, fix_id, REFUSED)
    assert refusal[1]["rules"] == ["slow-suite"]
    assert f"past the limit of {MAX_CHAIN_DEPTH}" in refusal[1]["reason"]


def test_a_follower_run_carries_the_next_depth(
    session_factory: SessionFactory, rules_dir: Path, config: RunnerConfig
) -> None:
    follower(session_factory, rules_dir, "{type: run.finished, rule: fix}")
    add_rule(session_factory, rules_dir, "report", """
        id: report
        triggers: [{type: run.finished, rule: slow-suite}]
        execution: {kind: built-in, actions: [{type: run-command, command: "true"}]}
        """)  # fmt: skip
    run_fix(session_factory, config)
    (slow,) = runs_of(session_factory, "slow-suite")
    execute_run(session_factory, config, slow.id, "test-worker")
    (report,) = runs_of(session_factory, "report")
    assert report.trigger["depth"] == 2 and report.trigger["run"]["rule"] == "slow-suite"


# --- rule health ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("stored", "ready", "said"),
    [
        ({"fix": True, "fix-web": False}, True, "runs of rule fix finishing"),
        ({"fix": False}, False, "the rules it follows (fix) are disabled"),
        ({"lint": True}, False, "no stored rule matches fix"),
        (None, True, "runs of rule fix finishing"),
    ],
)
def test_health_asks_for_an_enabled_rule_to_follow(
    stored: dict[str, bool] | None, ready: bool, said: str
) -> None:
    rule = parsed({"type": "run.finished", "rule": "fix"})
    assert isinstance(rule, Rule)
    (status,) = rule_health(rule, LiveState(utcnow(), rules=stored)).triggers
    assert status.ready is ready
    assert said in (status.path or status.error or "")
