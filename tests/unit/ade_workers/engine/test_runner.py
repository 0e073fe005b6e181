"""The run executor on SQLite with real subprocesses (no broker: execute_run is called directly)."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from ade_tasks.db import run_steps as run_steps_db
from ade_tasks.db import runs as runs_db
from ade_tasks.db.engine import SessionFactory
from ade_tasks.runs.dispatch import dispatch
from ade_tasks.runs.trigger_events import TriggerEvent
from ade_tasks.settings import ProviderSettings, Settings
from ade_tasks.states import RunStatus
from ade_tasks.testing import InMemorySender
from ade_workers.actions.registry import registry
from ade_workers.engine.runner import execute_run
from ade_workers.engine.runner_config import RunnerConfig
from tests.unit.conftest import add_rule


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / "src").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    os.symlink(tmp_path / "elsewhere", root / "out")
    return root


@pytest.fixture
def config(project: Path) -> RunnerConfig:
    settings = Settings(
        projects={"default": project}, heartbeat_seconds=0.2, kill_grace_seconds=0.5
    )
    secrets = {
        "PATH": os.environ["PATH"],
        "ADE_DATABASE_URL": "postgresql://user:hunter2@db/ade",
        "ADE_BROKER_URL": "redis://:hunter2@redis",
        "AWS_SECRET_ACCESS_KEY": "hunter2",
    }
    return RunnerConfig(settings, registry(), secrets)


def run_rule(
    session_factory: SessionFactory, rules_dir: Path, config: RunnerConfig, body: str, **inputs: str
) -> str:
    add_rule(session_factory, rules_dir, "r", "id: r\ntriggers: [{type: manual}]\n" + body)
    run_id = dispatch(session_factory, InMemorySender(), "r", TriggerEvent.manual(inputs)).run.id
    execute_run(session_factory, config, run_id, "test-worker")
    return run_id


def test_steps_run_in_order_and_are_recorded(
    session_factory: SessionFactory, rules_dir: Path, config: RunnerConfig, project: Path
) -> None:
    run_id = run_rule(
        session_factory,
        rules_dir,
        config,
        """
execution:
  kind: built-in
  actions:
    - {id: one, type: run-command, command: "pwd; echo $ADE_INPUT_WHO > marker", cwd: src}
    - {id: two, type: run-command, command: [cat, src/marker]}
""",
        who="operator",
    )
    with session_factory() as session:
        run = runs_db.get_run(session, run_id)
        steps = run_steps_db.list_steps(session, run_id)
    assert run.status == RunStatus.SUCCEEDED and run.error is None and run.finished_at
    assert [(s.step_id, s.status, s.exit_code) for s in steps] == [
        ("one", "succeeded", 0),
        ("two", "succeeded", 0),
    ]
    assert steps[0].output.strip() == str(project / "src")
    assert steps[1].output == "operator\n"


@pytest.mark.parametrize("cwd", ["../..", "/tmp", "out"])
def test_cwd_outside_the_project_is_refused_before_anything_starts(
    session_factory: SessionFactory, rules_dir: Path, config: RunnerConfig, project: Path, cwd: str
) -> None:
    marker = project.parent / f"ran-{cwd.replace('/', '_')}"
    run_id = run_rule(
        session_factory,
        rules_dir,
        config,
        f"""
execution:
  kind: built-in
  actions: [{{id: escape, type: run-command, command: "touch {marker}", cwd: "{cwd}"}}]
""",
    )
    with session_factory() as session:
        run = runs_db.get_run(session, run_id)
        (step,) = run_steps_db.list_steps(session, run_id)
    assert run.status == RunStatus.FAILED
    assert f"outside {project}" in (step.error or "") and step.exit_code is None
    assert not marker.exists()


def test_child_environment_holds_no_worker_secrets(
    session_factory: SessionFactory, rules_dir: Path, config: RunnerConfig
) -> None:
    run_id = run_rule(
        session_factory,
        rules_dir,
        config,
        """
execution:
  kind: built-in
  actions: [{id: env, type: run-command, command: "cat /proc/$$/environ | tr '\\\\0' '\\\\n'", env: {MINE: "1"}}]
""",
    )
    with session_factory() as session:
        (step,) = run_steps_db.list_steps(session, run_id)
    names = {line.split("=", 1)[0] for line in step.output.splitlines() if "=" in line}
    assert "hunter2" not in step.output
    assert {"PATH", "MINE", "ADE_RUN_ID", "ADE_RULE_ID"} <= names
    assert not names & {"ADE_DATABASE_URL", "ADE_BROKER_URL", "AWS_SECRET_ACCESS_KEY"}


def test_run_duration_guardrail_times_the_run_out(
    session_factory: SessionFactory, rules_dir: Path, config: RunnerConfig
) -> None:
    run_id = run_rule(
        session_factory,
        rules_dir,
        config,
        """
guardrails: {max_duration_min: 0.02}
execution:
  kind: built-in
  actions: [{id: slow, type: run-command, command: "sleep 30"}]
""",
    )
    with session_factory() as session:
        run = runs_db.get_run(session, run_id)
    assert run.status == RunStatus.TIMED_OUT
    assert run.error == (
        "step 'slow' (#1) was stopped: the rule's max_duration_min (0.02 min) was reached"
    )


def test_step_timeout_says_everything_the_command_started_was_stopped(
    session_factory: SessionFactory, rules_dir: Path, config: RunnerConfig
) -> None:
    # Given a step whose command outlives its timeout
    rule = """
execution:
  kind: built-in
  actions: [{id: slow, type: run-command, command: "sleep 30", timeout_sec: 1}]
"""
    # When it runs
    run_id = run_rule(session_factory, rules_dir, config, rule)
    # Then the step's error says the timeout stopped all of it
    with session_factory() as session:
        (step,) = run_steps_db.list_steps(session, run_id)
    assert (
        step.error == "killed after 1s (step timeout); everything the command started was stopped"
    )


def test_failure_stops_the_chain_unless_the_step_may_fail(
    session_factory: SessionFactory, rules_dir: Path, config: RunnerConfig
) -> None:
    run_id = run_rule(
        session_factory,
        rules_dir,
        config,
        """
execution:
  kind: built-in
  actions:
    - {id: flaky, type: run-command, command: "exit 3", continue_on_failure: true}
    - {id: broken, type: run-command, command: "echo boom; exit 7"}
    - {id: never, type: run-command, command: "true"}
""",
    )
    with session_factory() as session:
        run = runs_db.get_run(session, run_id)
        steps = run_steps_db.list_steps(session, run_id)
    assert [(s.step_id, s.status, s.exit_code) for s in steps] == [
        ("flaky", "failed", 3),
        ("broken", "failed", 7),
        ("never", "skipped", None),
    ]
    assert run.status == RunStatus.FAILED
    assert run.error == "step 'broken' (#2) failed: command exited with status 7"


def test_second_delivery_of_the_same_run_does_nothing(
    session_factory: SessionFactory, rules_dir: Path, config: RunnerConfig, project: Path
) -> None:
    run_id = run_rule(
        session_factory,
        rules_dir,
        config,
        """
execution:
  kind: built-in
  actions: [{id: count, type: run-command, command: "echo x >> count"}]
""",
    )
    assert execute_run(session_factory, config, run_id, "another-worker") is None
    assert (project / "count").read_text() == "x\n"


def test_a_rule_edited_into_a_cli_agent_rule_whose_cli_is_missing_fails_clearly(
    session_factory: SessionFactory, rules_dir: Path, config: RunnerConfig, tmp_path: Path
) -> None:
    missing = str(tmp_path / "no-such-claude")
    providers = {"claude-code": ProviderSettings(binary=missing)}
    config = replace(config, settings=config.settings.model_copy(update={"providers": providers}))
    header = "id: r\ntriggers: [{type: manual}]\n"
    add_rule(
        session_factory,
        rules_dir,
        "r",
        header + "execution: {kind: built-in, actions: [{type: run-command, command: 'true'}]}\n",
    )
    run_id = dispatch(session_factory, InMemorySender(), "r", TriggerEvent.manual()).run.id
    add_rule(
        session_factory,
        rules_dir,
        "r",
        header + "execution: {kind: agent-session, provider: claude-code, model: m, prompt: p}\n",
    )
    execute_run(session_factory, config, run_id, "test-worker")
    with session_factory() as session:
        run = runs_db.get_run(session, run_id)
    assert run.status == RunStatus.FAILED
    assert f"claude-code is not installed: `{missing}` not found" in (run.error or "")


def test_a_step_whose_action_this_worker_lacks_fails_naming_what_it_knows(
    session_factory: SessionFactory, rules_dir: Path, config: RunnerConfig
) -> None:
    # a worker older than the rule's action type (here: one without run-tests)
    older = replace(config, executors={"run-command": config.executors["run-command"]})
    run_id = run_rule(session_factory, rules_dir, older, """
execution: {kind: built-in, actions: [{type: run-tests, command: "true"}]}
""")  # fmt: skip
    with session_factory() as session:
        run = runs_db.get_run(session, run_id)
    assert run.status == RunStatus.FAILED
    assert run.error is not None and (
        "'run-tests' is not an action type this worker knows (run-command); update the "
        "workers to the rule's version" in run.error
    )
