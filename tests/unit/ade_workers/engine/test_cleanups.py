"""Lanes as ADE has them: a failed deferred cleanup fails the run it belongs to, `delete-lane`
can keep the branch (`delete_branch: false`) or delete the remote one too
(`delete_remote_branch`), and `lane.archived` is refused at validation (lanes are never
archived here) instead of silently meaning deletion."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from ade_tasks.clock import utcnow
from ade_tasks.db import lanes as lanes_db
from ade_tasks.db import run_events as run_events_db
from ade_tasks.db import run_steps as run_steps_db
from ade_tasks.db import runs as runs_db
from ade_tasks.db.engine import SessionFactory
from ade_tasks.rules.rule import Rule
from ade_tasks.rules.steps import DeleteLaneAction
from ade_tasks.states import CleanupStatus, RunStatus
from ade_workers.engine.cleanups import sweep_cleanups
from ade_workers.engine.runner import execute_run
from ade_workers.engine.runner_config import RunnerConfig
from tests.git_project import git
from tests.unit.ade_tasks.rules.test_loader_admission import document, problems_of
from tests.unit.ade_tasks.test_guardrails import run_of, start


def test_a_failed_deferred_cleanup_fails_its_run_with_the_steps_error(
    session_factory: SessionFactory, rules_dir: Path, config: RunnerConfig
) -> None:
    run_id = start(session_factory, rules_dir, """
execution:
  kind: built-in
  actions:
    - {id: lane, type: create-lane, name: dirty, base: main}
    - {id: later, type: delete-lane, after_minutes: 5}
""")  # fmt: skip
    assert execute_run(session_factory, config, run_id, "w1") == RunStatus.SUCCEEDED
    lane_path = Path(config.settings.lanes_dir("default")) / "dirty"
    (lane_path / "untracked.txt").write_text("work nobody committed\n")

    report = sweep_cleanups(
        session_factory, config.settings, "sweeper", utcnow() + timedelta(minutes=6)
    )

    run = run_of(session_factory, run_id)
    with session_factory() as session:
        (cleanup,) = lanes_db.list_cleanups(session)
        events = [kind for kind, _ in run_events_db.events_of(session, run_id)]
    assert report["failed"] == 1 and cleanup.status == CleanupStatus.FAILED
    assert run.status == RunStatus.FAILED
    assert run.error is not None
    assert run.error.startswith("step 'later': scheduled deletion of lane 'dirty' failed: ")
    assert "has uncommitted or untracked changes: untracked.txt" in run.error
    assert runs_db.CLEANUP_FAILED_EVENT in events
    assert lane_path.is_dir()  # nothing was deleted


def test_a_failed_cleanup_keeps_the_outcome_of_a_run_that_had_failed_already(
    session_factory: SessionFactory, rules_dir: Path, config: RunnerConfig
) -> None:
    run_id = start(session_factory, rules_dir, """
execution:
  kind: built-in
  actions:
    - {id: lane, type: create-lane, name: both, base: main}
    - {id: later, type: delete-lane, after_minutes: 5}
    - {id: boom, type: run-command, command: "exit 3"}
""")  # fmt: skip
    assert execute_run(session_factory, config, run_id, "w1") == RunStatus.FAILED
    own_error = run_of(session_factory, run_id).error
    lane_path = Path(config.settings.lanes_dir("default")) / "both"
    (lane_path / "untracked.txt").write_text("x\n")

    sweep_cleanups(session_factory, config.settings, "s", utcnow() + timedelta(minutes=6))

    run = run_of(session_factory, run_id)
    assert run.status == RunStatus.FAILED and run.error == own_error


def test_delete_branch_false_keeps_the_branch_now_and_when_deferred(
    session_factory: SessionFactory, rules_dir: Path, config: RunnerConfig, project: Path
) -> None:
    run_id = start(session_factory, rules_dir, """
execution:
  kind: built-in
  actions:
    - {id: a, type: create-lane, name: keep-now, base: main}
    - {id: b, type: delete-lane, delete_branch: false}
    - {id: c, type: create-lane, name: keep-later, base: main}
    - {id: d, type: delete-lane, after_minutes: 1, delete_branch: false}
""")  # fmt: skip
    assert execute_run(session_factory, config, run_id, "w1") == RunStatus.SUCCEEDED
    sweep_cleanups(session_factory, config.settings, "s", utcnow() + timedelta(minutes=2))

    lanes_dir = Path(config.settings.lanes_dir("default"))
    branches = git(project, "branch", "--list")
    assert not (lanes_dir / "keep-now").exists() and not (lanes_dir / "keep-later").exists()
    assert "ade/keep-now" in branches and "ade/keep-later" in branches
    with session_factory() as session:
        steps = {s.step_id: s for s in run_steps_db.list_steps(session, run_id)}
    assert "kept branch ade/keep-now" in (steps["b"].output or "")
    assert steps["d.cleanup"].status == "succeeded"
    assert run_of(session_factory, run_id).status == RunStatus.SUCCEEDED


def test_delete_remote_branch_deletes_it_on_origin_unless_another_remote_is_named() -> None:
    def action(**options: object) -> DeleteLaneAction:
        return DeleteLaneAction.model_validate({"id": "x", "type": "delete-lane", **options})

    assert action().remote is None
    assert action(delete_remote_branch=True).remote == "origin"
    assert action(delete_remote_branch=True, delete_remote="upstream").remote == "upstream"
    assert action(delete_remote="upstream").remote == "upstream"  # the older spelling


def test_keeping_the_remote_branch_while_naming_its_remote_is_refused_with_the_field() -> None:
    actions = [{"type": "delete-lane", "delete_remote": "origin", "delete_remote_branch": False}]
    execution = {"kind": "built-in", "actions": actions}

    (problem,) = problems_of(document(execution=execution))

    assert problem.startswith("r.yaml:execution.actions.0")
    assert "delete_remote names the remote 'origin' but delete_remote_branch is false" in problem


def test_lane_archived_is_refused_with_the_reason_not_taken_for_deletion() -> None:
    (problem,) = problems_of(document(triggers=[{"type": "lane.archived"}]))

    assert problem.startswith("r.yaml:triggers.0")
    assert "lanes are created and deleted, never archived; use lane.deleted" in problem
    still = document(triggers=[{"type": "lane.deleted"}])
    assert isinstance(Rule.model_validate(still), Rule)
