"""Guardrails on SQLite with real subprocesses and git: approvals, rate limits, budgets, the
review queue and deferred lane cleanups."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import update

from ade_tasks.clock import utcnow
from ade_tasks.db import approvals as approvals_db
from ade_tasks.db import lanes as lanes_db
from ade_tasks.db import run_steps as run_steps_db
from ade_tasks.db import runs as runs_db
from ade_tasks.db import usage as usage_db
from ade_tasks.db.engine import SessionFactory
from ade_tasks.db.schema import RunRow, ScheduledCleanupRow
from ade_tasks.errors import ConflictError
from ade_tasks.runs.approvals import decide_run
from ade_tasks.runs.dispatch import dispatch
from ade_tasks.runs.review import confidence, review
from ade_tasks.runs.trigger_events import TriggerEvent
from ade_tasks.states import CleanupStatus, QueueStatus, RunStatus
from ade_tasks.testing import InMemorySender
from ade_workers.engine.cleanups import sweep_cleanups
from ade_workers.engine.runner import execute_run
from ade_workers.engine.runner_config import RunnerConfig
from tests.git_project import git
from tests.unit.conftest import add_rule

HEADER = "id: r\ntriggers: [{type: manual}]\n"


def start(session_factory: SessionFactory, rules_dir: Path, body: str) -> str:
    add_rule(session_factory, rules_dir, "r", HEADER + body)
    return dispatch(session_factory, InMemorySender(), "r", TriggerEvent.manual()).run.id


def run_of(session_factory: SessionFactory, run_id: str) -> RunRow:
    with session_factory() as session:
        run = runs_db.get_run(session, run_id)
        session.expunge(run)
    return run


def test_require_human_parks_the_run_until_an_operator_approves(
    session_factory: SessionFactory, rules_dir: Path, config: RunnerConfig, project: Path
) -> None:
    run_id = start(session_factory, rules_dir, """
guardrails: {require_human: true}
execution:
  kind: built-in
  actions: [{id: deploy, type: run-command, command: "touch deployed"}]
""")  # fmt: skip

    assert execute_run(session_factory, config, run_id, "w1") == RunStatus.WAITING
    with session_factory() as session:
        (approval,) = approvals_db.approvals_of(session, run_id)
    assert run_of(session_factory, run_id).status == RunStatus.WAITING
    assert approval.status == "pending" and approval.step_index == 0
    assert not (project / "deployed").exists()

    sender = InMemorySender()
    decide_run(session_factory, sender, run_id, approve=True, by="alice", note="ship it")
    assert sender.sent == [(run_id, "ade.builtin", "r")]
    assert execute_run(session_factory, config, run_id, "w2") == RunStatus.SUCCEEDED
    assert (project / "deployed").exists()


def test_verify_before_publish_waits_after_the_steps_and_rejection_cancels(
    session_factory: SessionFactory, rules_dir: Path, config: RunnerConfig, project: Path
) -> None:
    run_id = start(session_factory, rules_dir, """
guardrails: {verify_before_publish: true}
outputs: {disposition: comment-only}
execution:
  kind: built-in
  actions: [{id: build, type: run-command, command: "touch built"}]
""")  # fmt: skip

    assert execute_run(session_factory, config, run_id, "w1") == RunStatus.WAITING
    assert (project / "built").exists()
    decide_run(session_factory, InMemorySender(), run_id, approve=False, by="bob", note="wrong")

    run = run_of(session_factory, run_id)
    assert (run.status, run.error) == (RunStatus.CANCELLED, "rejected by bob: wrong")
    with pytest.raises(ConflictError, match="not waiting for an approval"):
        decide_run(session_factory, InMemorySender(), run_id, approve=True, by="bob")


def test_approved_publish_gate_resumes_with_publishing_only(
    session_factory: SessionFactory, rules_dir: Path, config: RunnerConfig, project: Path
) -> None:
    run_id = start(session_factory, rules_dir, """
guardrails: {verify_before_publish: true}
outputs: {disposition: comment-only}
execution:
  kind: built-in
  actions: [{id: build, type: run-command, command: "echo x >> built"}]
""")  # fmt: skip
    execute_run(session_factory, config, run_id, "w1")

    decide_run(session_factory, InMemorySender(), run_id, approve=True, by="carol")
    assert execute_run(session_factory, config, run_id, "w2") == RunStatus.SUCCEEDED

    with session_factory() as session:
        steps = run_steps_db.list_steps(session, run_id)
    assert (project / "built").read_text() == "x\n"  # the build step did not run twice
    assert [(s.step_id, s.status) for s in steps] == [
        ("build", "succeeded"),
        ("publish", "succeeded"),
    ]
    assert steps[1].result["published"] == "run-log"


def test_rate_limit_records_excess_triggers_as_skipped(
    session_factory: SessionFactory, rules_dir: Path
) -> None:
    add_rule(session_factory, rules_dir, "r", HEADER + """
guardrails: {rate_limit: 2/hour}
execution: {kind: built-in, actions: [{type: run-command, command: "true"}]}
""")  # fmt: skip
    sender = InMemorySender()

    results = [dispatch(session_factory, sender, "r", TriggerEvent.manual()) for _ in range(3)]

    assert [r.run.status for r in results] == ["queued", "queued", "skipped"]
    assert "rate limit 2/hour" in (results[2].run.error or "")
    assert len(sender.sent) == 2


def test_a_used_up_run_seconds_budget_skips_new_triggers(
    session_factory: SessionFactory, rules_dir: Path
) -> None:
    add_rule(session_factory, rules_dir, "r", HEADER + """
guardrails: {budget: {run_seconds_per_day: 60}}
execution: {kind: built-in, actions: [{type: run-command, command: "true"}]}
""")  # fmt: skip
    with session_factory.begin() as session:
        usage_db.add_usage(session, "auto:r", usage_db.day_of(utcnow()), run_seconds=60.5)

    result = dispatch(session_factory, InMemorySender(), "r", TriggerEvent.manual())

    assert result.run.status == RunStatus.SKIPPED
    assert "run-seconds budget of auto:r (60 s/day) is used up" in (result.run.error or "")


def test_a_run_crossing_its_budget_midway_is_stopped_and_its_seconds_are_counted(
    session_factory: SessionFactory, rules_dir: Path, config: RunnerConfig
) -> None:
    run_id = start(session_factory, rules_dir, """
guardrails: {budget: {run_seconds_per_day: 10}}
execution: {kind: built-in, actions: [{id: long, type: run-command, command: "sleep 30"}]}
""")  # fmt: skip
    with session_factory.begin() as session:
        usage_db.add_usage(session, "auto:r", usage_db.day_of(utcnow()), run_seconds=9)

    status = execute_run(session_factory, config, run_id, "w1")

    run = run_of(session_factory, run_id)
    with session_factory() as session:
        used = usage_db.usage_on(session, usage_db.day_of(utcnow()), "auto:r").run_seconds
    assert status == RunStatus.TIMED_OUT
    assert "the run-seconds budget of auto:r (10 s/day) was reached" in (run.error or "")
    assert 9.9 < used < 12


def test_the_cluster_budget_skips_a_claimed_run_before_its_first_step(
    session_factory: SessionFactory, rules_dir: Path, config: RunnerConfig, project: Path
) -> None:
    run_id = start(session_factory, rules_dir, """
execution: {kind: built-in, actions: [{id: a, type: run-command, command: "touch ran"}]}
""")  # fmt: skip
    capped = RunnerConfig(
        config.settings.model_copy(update={"budget_run_seconds_per_day": 100.0}),
        config.executors,
        config.base_env,
    )
    with session_factory.begin() as session:
        usage_db.add_usage(session, "someone-else", usage_db.day_of(utcnow()), run_seconds=100)

    assert execute_run(session_factory, capped, run_id, "w1") == RunStatus.SKIPPED
    assert "cluster's run-seconds budget" in (run_of(session_factory, run_id).error or "")
    assert not (project / "ran").exists()


def test_confidence_follows_the_documented_formula() -> None:
    assert confidence("quick", 0) == 0.58
    assert confidence("full", 4) == 0.79  # .73 + .06
    assert confidence("security", 20) == 0.91  # the sources bonus caps at .12
    assert confidence("quick", 2, threshold=0.85) == 0.56  # .58 + .03 - .05
    assert confidence("quick", 0, threshold=1.0) == 0.492  # .58 - .35 x .25
    assert review(
        RunStatus.SUCCEEDED, profile="full", context_sources=1, threshold=0.65, findings=0,
        verification_pending=False, deterministic=False, review_required=False,
    ).queue_status is QueueStatus.COMPLETED_CLEAN  # fmt: skip
    assert review(
        RunStatus.SUCCEEDED, profile="quick", context_sources=1, threshold=0.65, findings=0,
        verification_pending=False, deterministic=False, review_required=False,
    ).queue_status is QueueStatus.PENDING_REVIEW  # fmt: skip


def test_deferred_lane_deletion_is_swept_and_appended_to_the_run(
    session_factory: SessionFactory, rules_dir: Path, config: RunnerConfig, project: Path
) -> None:
    run_id = start(session_factory, rules_dir, """
execution:
  kind: built-in
  actions:
    - {id: lane, type: create-lane, name: temp, base: main}
    - {id: later, type: delete-lane, after_minutes: 5}
""")  # fmt: skip
    assert execute_run(session_factory, config, run_id, "w1") == RunStatus.SUCCEEDED
    lane_path = Path(config.settings.lanes_dir("default")) / "temp"
    assert lane_path.is_dir()

    early = sweep_cleanups(session_factory, config.settings, "sweeper", utcnow())
    late = sweep_cleanups(
        session_factory, config.settings, "sweeper", utcnow() + timedelta(minutes=6)
    )

    with session_factory() as session:
        steps = run_steps_db.list_steps(session, run_id)
        (cleanup,) = lanes_db.list_cleanups(session)
    assert early["done"] == 0 and late["done"] == 1
    assert not lane_path.exists()
    assert "ade/temp" not in git(project, "branch", "--list")
    assert cleanup.status == CleanupStatus.DONE
    assert [(s.step_id, s.status) for s in steps][-1] == ("later.cleanup", "succeeded")


def test_a_sweep_killed_mid_deletion_is_completed_by_the_next_sweep(
    session_factory: SessionFactory, rules_dir: Path, config: RunnerConfig, project: Path
) -> None:
    run_id = start(session_factory, rules_dir, """
execution:
  kind: built-in
  actions:
    - {id: lane, type: create-lane, name: half, base: main}
    - {id: later, type: delete-lane, after_minutes: 1}
""")  # fmt: skip
    execute_run(session_factory, config, run_id, "w1")
    lane_path = Path(config.settings.lanes_dir("default")) / "half"
    # A sweeper claimed the row, removed the worktree, and died before the branch went.
    with session_factory.begin() as session:
        session.execute(
            update(ScheduledCleanupRow).values(
                status=CleanupStatus.EXECUTING, claimed_at=utcnow() - timedelta(minutes=30)
            )
        )
    git(project, "worktree", "remove", str(lane_path))

    report = sweep_cleanups(
        session_factory, config.settings, "sweeper-2", utcnow() + timedelta(minutes=2)
    )

    with session_factory() as session:
        (cleanup,) = lanes_db.list_cleanups(session)
    assert report == {"done": 1, "failed": 0, "reset": 1}
    assert cleanup.status == CleanupStatus.DONE and cleanup.attempts == 1
    assert "ade/half" not in git(project, "branch", "--list")


def test_delete_lane_without_a_lane_fails_instead_of_guessing(
    session_factory: SessionFactory, rules_dir: Path, config: RunnerConfig
) -> None:
    run_id = start(session_factory, rules_dir, """
execution: {kind: built-in, actions: [{id: drop, type: delete-lane}]}
""")  # fmt: skip

    assert execute_run(session_factory, config, run_id, "w1") == RunStatus.FAILED
    assert "has no lane to act on" in (run_of(session_factory, run_id).error or "")


def test_a_scheduled_cleanup_can_be_cancelled_once(
    session_factory: SessionFactory, rules_dir: Path, config: RunnerConfig
) -> None:
    run_id = start(session_factory, rules_dir, """
execution:
  kind: built-in
  actions:
    - {id: lane, type: create-lane, name: keep, base: main}
    - {id: later, type: delete-lane, after_minutes: 1}
""")  # fmt: skip
    execute_run(session_factory, config, run_id, "w1")
    with session_factory() as session:
        (cleanup,) = lanes_db.list_cleanups(session)

    with session_factory.begin() as session:
        lanes_db.cancel_cleanup(session, cleanup.id)
    with pytest.raises(ConflictError, match="only scheduled cleanups can be cancelled"):
        with session_factory.begin() as session:
            lanes_db.cancel_cleanup(session, cleanup.id)
    report = sweep_cleanups(
        session_factory, config.settings, "sweeper", utcnow() + timedelta(minutes=2)
    )
    assert report["done"] == 0
    assert (Path(config.settings.lanes_dir("default")) / "keep").is_dir()


def test_a_swept_lane_triggers_lane_deleted_rules_which_run_in_the_project_root(
    session_factory: SessionFactory, rules_dir: Path, config: RunnerConfig, project: Path
) -> None:
    add_rule(session_factory, rules_dir, "gone", """
id: gone
triggers: [{type: lane.deleted}]
execution: {kind: built-in, actions: [{id: note, type: run-command, command: "echo {{trigger.lane.name}} >> deleted-lanes"}]}
""")  # fmt: skip
    add_rule(session_factory, rules_dir, "elsewhere", """
id: elsewhere
project: other
triggers: [{type: lane.deleted}]
execution: {kind: built-in, actions: [{type: run-command, command: "true"}]}
""")  # fmt: skip
    run_id = start(session_factory, rules_dir, """
execution:
  kind: built-in
  actions:
    - {id: lane, type: create-lane, name: brief, base: main}
    - {id: later, type: delete-lane, after_minutes: 1}
""")  # fmt: skip
    execute_run(session_factory, config, run_id, "w1")
    sender = InMemorySender()

    sweep_cleanups(
        session_factory, config.settings, "sweeper", utcnow() + timedelta(minutes=2), sender
    )

    ((triggered_id, _, rule_id),) = sender.sent  # not the rule of project `other`
    assert rule_id == "gone"
    assert execute_run(session_factory, config, triggered_id, "w2") == RunStatus.SUCCEEDED
    assert (project / "deleted-lanes").read_text() == "brief\n"


@pytest.mark.parametrize(
    ("command", "required", "status", "queue", "steps"),
    [
        ("test -f built", False, "succeeded", "completed-clean", ["build", "verify", "publish"]),
        ("test -f missing", False, "succeeded", "verification-required", ["build", "verify"]),
        ("test -f missing", True, "failed", "verification-required", ["build", "verify"]),
    ],
    ids=["verified", "unverified", "unverified-required"],
)
def test_the_verification_command_decides_publishing_and_the_review_queue(
    session_factory: SessionFactory,
    rules_dir: Path,
    config: RunnerConfig,
    command: str,
    required: bool,
    status: str,
    queue: str,
    steps: list[str],
) -> None:
    run_id = start(session_factory, rules_dir, f"""
review_profile: full
verification: {{command: "{command}", required: {str(required).lower()}}}
outputs: {{disposition: comment-only}}
execution: {{kind: built-in, actions: [{{id: build, type: run-command, command: "touch built"}}]}}
""")  # fmt: skip

    execute_run(session_factory, config, run_id, "w1")

    run = run_of(session_factory, run_id)
    with session_factory() as session:
        recorded = [s.step_id for s in run_steps_db.list_steps(session, run_id)]
    assert (run.status, run.queue_status, recorded) == (status, queue, steps)
