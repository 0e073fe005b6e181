"""Review-queue defaults a team can live with: a deterministic run that succeeded cleanly is
`completed-clean`; failures, findings, agents' doubts and rules that ask for review are not."""

from __future__ import annotations

from pathlib import Path

import pytest

from ade_tasks.db import runs as runs_db
from ade_tasks.db.engine import SessionFactory
from ade_tasks.db.schema import RunRow
from ade_tasks.rules.loader import load_rules_dir
from ade_tasks.runs.dispatch import dispatch
from ade_tasks.runs.review import review
from ade_tasks.runs.trigger_events import TriggerEvent
from ade_tasks.states import QueueStatus, RunStatus
from ade_tasks.testing import InMemorySender
from ade_workers.engine.runner import execute_run
from ade_workers.engine.runner_config import RunnerConfig
from tests.conftest import write_rule
from tests.unit.conftest import add_rule

HELLO = """
id: r
triggers: [{type: manual}, {type: schedule, cron: "* * * * *"}]
execution:
  kind: built-in
  actions: [{id: greet, type: run-command, command: "%s"}]
"""


def finished(
    session_factory: SessionFactory, rules_dir: Path, config: RunnerConfig, text: str
) -> RunRow:
    add_rule(session_factory, rules_dir, "r", text)
    run_id = dispatch(session_factory, InMemorySender(), "r", TriggerEvent.manual()).run.id
    execute_run(session_factory, config, run_id, "w1")
    with session_factory() as session:
        run = runs_db.get_run(session, run_id)
        session.expunge(run)
    return run


@pytest.mark.parametrize(
    ("command", "extra", "status", "queue"),
    [
        ("echo hello", "", RunStatus.SUCCEEDED, QueueStatus.COMPLETED_CLEAN),
        ("echo hello", "review_required: true\n", RunStatus.SUCCEEDED, QueueStatus.PENDING_REVIEW),
        ("exit 3", "", RunStatus.FAILED, QueueStatus.PENDING_REVIEW),
        (
            "echo hello",
            "verification: {command: 'exit 1', required: true}\n",
            RunStatus.FAILED,
            QueueStatus.VERIFICATION_REQUIRED,
        ),
        (
            "echo hello",
            "verification: {command: 'exit 1'}\nreview_required: true\n",
            RunStatus.SUCCEEDED,
            QueueStatus.VERIFICATION_REQUIRED,
        ),
        (
            "echo hello",
            "verification: {command: 'true', required: true}\n",
            RunStatus.SUCCEEDED,
            QueueStatus.COMPLETED_CLEAN,
        ),
        (
            "exit 3",
            "verification: {required: true}\n",
            RunStatus.FAILED,
            QueueStatus.PENDING_REVIEW,
        ),
        (
            "echo hello",
            "verification: {required: true}\n",
            RunStatus.SUCCEEDED,
            QueueStatus.VERIFICATION_REQUIRED,
        ),
    ],
    ids=[
        "clean",
        "review-required",
        "failed",
        "required-verification-failed",
        "verification-failed-under-review",
        "verified",
        "failed-before-verification",
        "required-without-command",
    ],
)
def test_a_deterministic_run_needs_review_when_it_failed_or_its_rule_asks_and_verification_when_that_failed(
    session_factory: SessionFactory,
    rules_dir: Path,
    config: RunnerConfig,
    command: str,
    extra: str,
    status: RunStatus,
    queue: QueueStatus,
) -> None:
    # Given a built-in rule with the lowest-confidence profile (quick: .58 + .015 < .65)
    # When a run of it finishes
    run = finished(session_factory, rules_dir, config, HELLO % command + extra)

    # Then its status alone (and the rule's wish) decides the queue, not the confidence
    assert (run.status, run.queue_status) == (status, queue)
    verified = "command:" in extra  # the verify step ran too: one more context source
    assert run.confidence == (0.61 if verified else 0.595)  # still recorded


def test_an_agent_run_below_its_threshold_still_waits_for_review() -> None:
    def queue(*, deterministic: bool) -> QueueStatus | None:
        return review(
            RunStatus.SUCCEEDED, profile="quick", context_sources=1, threshold=0.65, findings=0,
            verification_pending=False, deterministic=deterministic, review_required=False,
        ).queue_status  # fmt: skip

    assert queue(deterministic=False) is QueueStatus.PENDING_REVIEW
    assert queue(deterministic=True) is QueueStatus.COMPLETED_CLEAN


def test_only_an_agent_session_makes_a_rule_agentic(tmp_path: Path) -> None:
    step = "{id: ask, type: agent-session, provider: openai, model: m, prompt: hi}"
    write_rule(tmp_path, "a.yaml", HELLO.replace("id: r", "id: a") % "true")
    write_rule(
        tmp_path,
        "b.yaml",
        HELLO.replace("id: r", "id: b").replace("actions: [", f"actions: [{step}, ") % "true",
    )
    result = load_rules_dir(tmp_path)
    assert {loaded.rule.id: loaded.rule.agentic for loaded in result.rules} == {
        "a": False,
        "b": True,
    }


def test_review_required_must_be_true_or_false(tmp_path: Path) -> None:
    write_rule(tmp_path, "r.yaml", HELLO % "true" + "review_required: sometimes\n")
    (problem,) = load_rules_dir(tmp_path).problems
    assert (problem.field, problem.reason) == (
        "review_required",
        "must be true or false, not the string 'sometimes'",
    )
