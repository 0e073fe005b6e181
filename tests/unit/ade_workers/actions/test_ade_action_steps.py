"""`ade-action` steps in real chains on SQLite: rules, runs, lanes and cleanups changed through
the allow-listed actions, and the refusals an operator should see."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, update

from ade_tasks.db import approvals as approvals_db
from ade_tasks.db import run_events as run_events_db
from ade_tasks.db import run_steps as run_steps_db
from ade_tasks.db import runs as runs_db
from ade_tasks.db.engine import SessionFactory
from ade_tasks.db.schema import RuleRow, RunRow, RunStepRow, ScheduledCleanupRow
from ade_tasks.errors import ConflictError
from ade_tasks.runs.approvals import decide_run
from ade_tasks.runs.dispatch import dispatch
from ade_tasks.runs.trigger_events import TriggerEvent
from ade_tasks.states import CleanupStatus, RunStatus
from ade_tasks.testing import InMemorySender
from ade_workers.engine.runner import execute_run
from ade_workers.engine.runner_config import RunnerConfig
from tests.unit.conftest import add_rule


def rule(rule_id: str, steps: str, extra: str = "") -> str:
    return (
        f"id: {rule_id}\ntriggers: [{{type: manual}}]\n{extra}"
        f"execution:\n  kind: built-in\n  actions:\n{steps}"
    )


def run(
    session_factory: SessionFactory,
    config: RunnerConfig,
    rule_id: str,
    inputs: dict[str, Any] | None = None,
) -> tuple[str, RunStatus | None]:
    event = TriggerEvent.manual(inputs)
    run_id = dispatch(session_factory, InMemorySender(), rule_id, event).run.id
    return run_id, execute_run(session_factory, config, run_id, "w1")


def steps_of(session_factory: SessionFactory, run_id: str) -> list[RunStepRow]:
    with session_factory() as session:
        steps = list(run_steps_db.list_steps(session, run_id))
        session.expunge_all()
    return steps


def run_row(session_factory: SessionFactory, run_id: str) -> RunRow:
    with session_factory() as session:
        row = runs_db.get_run(session, run_id)
        session.expunge(row)
    return row


def enabled(session_factory: SessionFactory, rule_id: str) -> bool:
    with session_factory() as session:
        return bool(session.scalar(select(RuleRow.enabled).where(RuleRow.id == rule_id)))


NIGHTLY = rule("nightly", '    - {type: run-command, command: "true"}\n')


def test_rules_disable_disables_the_rule_in_the_database(
    session_factory: SessionFactory, rules_dir: Path, config: RunnerConfig
) -> None:
    add_rule(session_factory, rules_dir, "nightly", NIGHTLY)
    add_rule(session_factory, rules_dir, "ops", rule("ops", """\
    - {id: disable, type: ade-action, action: rules.disable, args: {rule_id: nightly}}
"""))  # fmt: skip

    run_id, status = run(session_factory, config, "ops")

    assert status == RunStatus.SUCCEEDED
    assert not enabled(session_factory, "nightly")
    (step,) = steps_of(session_factory, run_id)
    assert step.output == "rule 'nightly' is disabled (was enabled)"
    assert step.result == {"rule_id": "nightly", "enabled": False, "changed": True}


def test_runs_cancel_cancels_a_waiting_run_and_closes_its_approval(
    session_factory: SessionFactory, rules_dir: Path, config: RunnerConfig, project: Path
) -> None:
    add_rule(session_factory, rules_dir, "gated", rule(
        "gated", '    - {type: run-command, command: "touch deployed"}\n',
        extra="guardrails: {require_human: true}\n",
    ))  # fmt: skip
    waiting, status = run(session_factory, config, "gated")
    assert status == RunStatus.WAITING
    add_rule(session_factory, rules_dir, "ops", rule("ops", f"""\
    - {{id: stop, type: ade-action, action: runs.cancel, args: {{run_id: "{waiting}"}}}}
"""))  # fmt: skip

    ops_run, status = run(session_factory, config, "ops")

    assert status == RunStatus.SUCCEEDED
    cancelled = run_row(session_factory, waiting)
    assert cancelled.status == RunStatus.CANCELLED
    assert cancelled.error == f"cancelled by rule ops run {ops_run}"
    assert cancelled.finished_at is not None and cancelled.lease_expires_at is None
    with session_factory() as session:
        (approval,) = approvals_db.approvals_of(session, waiting)
    # settled as an operator's cancel is (one cancel): the approval cancelled, the event written
    assert (approval.status, approval.decided_by) == ("cancelled", f"rule ops run {ops_run}")
    with session_factory() as session:
        events = run_events_db.events_of(session, waiting, "run.cancelled")
    assert events == [("run.cancelled", {"by": f"rule ops run {ops_run}", "note": None,
                                         "was": "waiting"})]  # fmt: skip
    with pytest.raises(ConflictError, match="not waiting for an approval"):
        decide_run(session_factory, InMemorySender(), waiting, approve=True, by="alice")
    assert not (project / "deployed").exists()
    (step,) = steps_of(session_factory, ops_run)
    assert step.output == f"cancelled run {waiting} of rule 'gated' (it was waiting)"


def test_runs_cancel_cancels_a_queued_run_before_any_worker_claims_it(
    session_factory: SessionFactory, rules_dir: Path, config: RunnerConfig
) -> None:
    add_rule(session_factory, rules_dir, "nightly", NIGHTLY)
    queued = dispatch(session_factory, InMemorySender(), "nightly", TriggerEvent.manual()).run.id
    add_rule(session_factory, rules_dir, "ops", rule("ops", f"""\
    - {{id: stop, type: ade-action, action: runs.cancel, args: {{run_id: "{queued}"}}}}
"""))  # fmt: skip

    _, status = run(session_factory, config, "ops")

    assert status == RunStatus.SUCCEEDED
    assert run_row(session_factory, queued).status == RunStatus.CANCELLED
    assert execute_run(session_factory, config, queued, "w2") is None  # nothing left to run


def test_runs_cancel_of_a_finished_run_changes_nothing(
    session_factory: SessionFactory, rules_dir: Path, config: RunnerConfig
) -> None:
    add_rule(session_factory, rules_dir, "nightly", NIGHTLY)
    done, _ = run(session_factory, config, "nightly")
    add_rule(session_factory, rules_dir, "ops", rule("ops", f"""\
    - {{id: stop, type: ade-action, action: runs.cancel, args: {{run_id: "{done}"}}}}
"""))  # fmt: skip

    ops_run, status = run(session_factory, config, "ops")

    assert status == RunStatus.SUCCEEDED
    assert run_row(session_factory, done).status == RunStatus.SUCCEEDED
    (step,) = steps_of(session_factory, ops_run)
    assert step.result["cancelled"] is False and step.result["status"] == "succeeded"


def test_lanes_list_shows_the_lane_an_earlier_step_created(
    session_factory: SessionFactory, rules_dir: Path, config: RunnerConfig
) -> None:
    add_rule(session_factory, rules_dir, "lanes", rule("lanes", """\
    - {id: lane, type: create-lane, name: feature-x, base: main}
    - {id: list, type: ade-action, action: lanes.list, args: {author: mallory}}
"""))  # fmt: skip

    run_id, status = run(session_factory, config, "lanes")

    assert status == RunStatus.SUCCEEDED
    listed = steps_of(session_factory, run_id)[1]
    assert listed.result["count"] == 1
    (lane,) = listed.result["lanes"]
    assert (lane["name"], lane["branch"], lane["status"]) == (
        "feature-x",
        "ade/feature-x",
        "active",
    )
    assert lane["run_id"] == run_id
    assert "1 lane(s) (active)" in listed.output and "feature-x  ade/feature-x" in listed.output
    # the identity argument was dropped with a note, not passed on or refused
    assert listed.output.startswith("note: ignored argument 'author'")
    assert len(listed.result["notes"]) == 1


def test_cleanups_list_and_cancel_keep_a_deferred_lane(
    session_factory: SessionFactory, rules_dir: Path, config: RunnerConfig
) -> None:
    add_rule(session_factory, rules_dir, "temp", rule("temp", """\
    - {id: lane, type: create-lane, name: temp, base: main}
    - {id: later, type: delete-lane, after_minutes: 5}
"""))  # fmt: skip
    temp_run, _ = run(session_factory, config, "temp")
    add_rule(session_factory, rules_dir, "ops", rule("ops", """\
    - {id: list, type: ade-action, action: cleanups.list, args: {status: scheduled}}
    - id: cancel
      type: ade-action
      action: cleanups.cancel
      args: {cleanup_id: "{{steps.list.result.cleanups.0.id}}"}
"""))  # fmt: skip

    ops_run, status = run(session_factory, config, "ops")

    assert status == RunStatus.SUCCEEDED
    listed, cancelled = steps_of(session_factory, ops_run)
    (item,) = listed.result["cleanups"]
    assert (item["run_id"], item["step_id"], item["status"]) == (temp_run, "later", "scheduled")
    assert cancelled.result == {"cleanup_id": item["id"], "cancelled": True, "status": "cancelled"}
    with session_factory() as session:
        row = session.get(ScheduledCleanupRow, item["id"])
        assert row is not None and row.status == CleanupStatus.CANCELLED

    # Cancelling it again (a retried run) succeeds without changing anything.
    add_rule(session_factory, rules_dir, "again", rule("again", f"""\
    - {{id: cancel, type: ade-action, action: cleanups.cancel, args: {{cleanup_id: {item["id"]}}}}}
"""))  # fmt: skip
    again_run, status = run(session_factory, config, "again")
    assert status == RunStatus.SUCCEEDED
    assert steps_of(session_factory, again_run)[0].output == (
        f"scheduled cleanup #{item['id']} was already cancelled"
    )


def test_cleanups_cancel_of_an_unknown_cleanup_fails_clearly(
    session_factory: SessionFactory, rules_dir: Path, config: RunnerConfig
) -> None:
    add_rule(session_factory, rules_dir, "ops", rule("ops", """\
    - {id: cancel, type: ade-action, action: cleanups.cancel, args: {cleanup_id: 999}}
"""))  # fmt: skip

    run_id, status = run(session_factory, config, "ops")

    assert status == RunStatus.FAILED
    assert run_row(session_factory, run_id).error == (
        "step 'cancel' (#1) failed: step 'cancel': ade-action 'cleanups.cancel': scheduled "
        "cleanup 999 does not exist; list them with `ade-tasks cleanups list` (or an "
        "ade-action cleanups.list step)"
    )


def test_github_comment_without_a_token_fails_naming_the_setting(
    session_factory: SessionFactory, rules_dir: Path, config: RunnerConfig
) -> None:
    assert config.settings.github.token is None
    add_rule(session_factory, rules_dir, "say", rule("say", """\
    - {id: say, type: ade-action, action: github.comment, args: {repo: acme/api, number: 7, body: hi}}
"""))  # fmt: skip

    run_id, status = run(session_factory, config, "say")

    assert status == RunStatus.FAILED
    (step,) = steps_of(session_factory, run_id)
    assert step.status == "failed"
    assert step.error == (
        "step 'say': ade-action 'github.comment': ADE_GITHUB__TOKEN is not set on this worker, "
        "so nothing was sent to acme/api; set it to a token that may write to the repository's "
        "issues and pull requests"
    )


def test_run_time_arguments_are_validated_after_rendering(
    session_factory: SessionFactory, rules_dir: Path, config: RunnerConfig
) -> None:
    add_rule(session_factory, rules_dir, "say", rule("say", """\
    - id: say
      type: ade-action
      action: github.comment
      args: {repo: acme/api, number: "{{trigger.inputs.pr}}", body: hi}
""", extra="inputs: {pr: {type: string, required: true}}\n"))  # fmt: skip

    run_id, status = run(session_factory, config, "say", {"pr": "seven"})

    assert status == RunStatus.FAILED
    (step,) = steps_of(session_factory, run_id)
    assert step.error == (
        "step 'say': ade-action 'github.comment': args.number: must be a whole number, "
        "not the string 'seven'"
    )


def test_an_api_created_rule_may_not_call_an_admin_only_action(
    session_factory: SessionFactory, rules_dir: Path, config: RunnerConfig
) -> None:
    add_rule(session_factory, rules_dir, "nightly", NIGHTLY)
    add_rule(session_factory, rules_dir, "ops", rule("ops", """\
    - {id: disable, type: ade-action, action: rules.disable, args: {rule_id: nightly}}
"""))  # fmt: skip
    with session_factory.begin() as session:
        session.execute(update(RuleRow).where(RuleRow.id == "ops").values(source="api"))

    run_id, status = run(session_factory, config, "ops")

    assert status == RunStatus.FAILED
    assert enabled(session_factory, "nightly")
    (step,) = steps_of(session_factory, run_id)
    assert step.error == (
        "step 'disable': ade-action 'rules.disable': this action is admin-only, and rule 'ops' is "
        "not from the cluster's rules directory (its source is 'api'); only rules the "
        "cluster's administrators put in the rules directory may call it"
    )
