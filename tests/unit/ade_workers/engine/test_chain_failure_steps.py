"""Run a step only if an earlier one failed: `condition: failure()` or `failed('id')`, with
no other flag; the run still ends failed."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from ade_tasks.db import run_steps as run_steps_db
from ade_tasks.db.engine import SessionFactory
from ade_tasks.rules.conditions import parse_condition
from ade_tasks.rules.loader import load_rules_dir
from ade_tasks.runs.dispatch import dispatch
from ade_tasks.runs.trigger_events import TriggerEvent
from ade_tasks.states import RunStatus
from ade_tasks.templating import TemplateContext
from ade_tasks.testing import InMemorySender
from ade_workers.engine.runner import execute_run
from ade_workers.engine.runner_config import RunnerConfig
from tests.conftest import write_rule
from tests.unit.conftest import add_rule

# The README's recipe, as a user writes it.
RECIPE = """
id: tests-with-report
triggers: [{type: manual}]
execution:
  kind: built-in
  actions:
    - id: tests
      type: run-command
      command: "%s"
    - id: report-failure
      type: run-command
      condition: "failed('tests')"
      command: "echo tests failed with exit {{steps.tests.exit_code}} > failure-report"
    - id: notify-any-failure
      type: run-command
      condition: failure()
      command: "touch notified"
    - id: deploy
      type: run-command
      command: "touch deployed"
"""


def run(
    session_factory: SessionFactory, rules_dir: Path, config: RunnerConfig, command: str
) -> tuple[RunStatus, dict[str, str]]:
    add_rule(session_factory, rules_dir, "r", RECIPE % command)
    sender = InMemorySender()
    run_id = dispatch(session_factory, sender, "tests-with-report", TriggerEvent.manual()).run.id
    status = execute_run(session_factory, config, run_id, "w1")
    with session_factory() as session:
        steps = {s.step_id: s.status for s in run_steps_db.list_steps(session, run_id)}
    assert status is not None
    return status, steps


def test_failure_steps_run_after_a_failure_and_the_run_still_fails(
    session_factory: SessionFactory, rules_dir: Path, config: RunnerConfig, project: Path
) -> None:
    status, steps = run(session_factory, rules_dir, config, "exit 3")

    assert status == RunStatus.FAILED
    assert steps == {
        "tests": "failed",
        "report-failure": "succeeded",
        "notify-any-failure": "succeeded",
        "deploy": "skipped",
    }
    assert (project / "failure-report").read_text() == "tests failed with exit 3\n"
    assert (project / "notified").exists() and not (project / "deployed").exists()


def test_failure_steps_are_skipped_when_nothing_failed(
    session_factory: SessionFactory, rules_dir: Path, config: RunnerConfig, project: Path
) -> None:
    status, steps = run(session_factory, rules_dir, config, "true")

    assert status == RunStatus.SUCCEEDED
    assert steps == {
        "tests": "succeeded",
        "report-failure": "skipped",
        "notify-any-failure": "skipped",
        "deploy": "succeeded",
    }
    assert not (project / "failure-report").exists() and (project / "deployed").exists()


@pytest.mark.parametrize(
    ("condition", "problem"),
    [
        (
            "failed('build')",
            "unknown variable steps.build.status; step 'build' is not an earlier step; "
            "earlier steps: report-failure, tests",
        ),
        ("failed()", "failed() needs the steps it asks about at column 1"),
        ("failure(", "expected ')' in failure(...) at column 9"),
    ],
)
def test_a_wrong_failure_condition_is_refused_at_load(
    tmp_path: Path, condition: str, problem: str
) -> None:
    text = (RECIPE % "true").replace("condition: failure()", f'condition: "{condition}"')
    write_rule(tmp_path, "r.yaml", text)

    (found,) = load_rules_dir(tmp_path).problems

    assert found.field == "execution.actions.2.condition"
    assert found.reason.startswith(problem), found.reason


@pytest.mark.parametrize(
    ("statuses", "any_failed", "a_failed"),
    [
        ({"a": "succeeded", "b": "skipped"}, False, False),
        ({"a": "succeeded", "b": "timed_out"}, True, False),
        ({"a": "failed", "b": "skipped"}, True, True),
    ],
)
def test_failure_counts_failed_and_timed_out_steps(
    statuses: dict[str, str], any_failed: bool, a_failed: bool
) -> None:
    steps = {step_id: {"status": status} for step_id, status in statuses.items()}
    context = TemplateContext(trigger={}, steps=steps, rule={}, now=datetime.now(UTC))

    assert parse_condition("failure()", "w").evaluate(context) is any_failed
    assert parse_condition("failed('a')", "w").evaluate(context) is a_failed
    assert parse_condition("not failed('a', 'b')", "w").evaluate(context) is not any_failed
