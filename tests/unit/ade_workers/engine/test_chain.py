"""Step semantics of built-in chains on SQLite with real subprocesses and real git repositories:
conditions, retries, always_run, templating, secrets, run-tests, lanes and path guardrails."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from ade_tasks.db import run_steps as run_steps_db
from ade_tasks.db import run_views as run_views_db
from ade_tasks.db import runs as runs_db
from ade_tasks.db.engine import SessionFactory
from ade_tasks.db.schema import LaneRow, RunRow
from ade_tasks.runs.dispatch import dispatch
from ade_tasks.runs.trigger_events import TriggerEvent
from ade_tasks.states import QueueStatus, RunStatus
from ade_tasks.testing import InMemorySender
from ade_workers.engine.runner import execute_run
from ade_workers.engine.runner_config import RunnerConfig
from tests.git_project import SECRET
from tests.unit.conftest import add_rule


def run_rule(
    session_factory: SessionFactory,
    rules_dir: Path,
    config: RunnerConfig,
    body: str,
    **inputs: str,
) -> RunRow:
    header = "id: r\ntriggers: [{type: manual}]\n"
    if inputs:
        header += "inputs: {" + ", ".join(f"{k}: {{type: string}}" for k in inputs) + "}\n"
    add_rule(session_factory, rules_dir, "r", header + body)
    run_id = dispatch(session_factory, InMemorySender(), "r", TriggerEvent.manual(inputs)).run.id
    execute_run(session_factory, config, run_id, "test-worker")
    with session_factory() as session:
        run = runs_db.get_run(session, run_id)
        session.expunge(run)
    return run


def steps_of(session_factory: SessionFactory, run_id: str) -> list[tuple[str, str, str]]:
    with session_factory() as session:
        return [(s.step_id, s.status, s.output) for s in run_steps_db.list_steps(session, run_id)]


def test_condition_over_an_earlier_step_decides_whether_a_step_runs(
    session_factory: SessionFactory, rules_dir: Path, config: RunnerConfig
) -> None:
    run = run_rule(session_factory, rules_dir, config, """
execution:
  kind: built-in
  actions:
    - {id: probe, type: run-command, command: "echo ready"}
    - {id: go, type: run-command, command: "echo ran", condition: "steps.probe.output contains 'ready'"}
    - {id: stop, type: run-command, command: "echo ran", condition: "steps.probe.status == 'failed'"}
""")  # fmt: skip

    steps = steps_of(session_factory, run.id)

    assert [(s[0], s[1]) for s in steps] == [
        ("probe", "succeeded"),
        ("go", "succeeded"),
        ("stop", "skipped"),
    ]
    assert run.status == RunStatus.SUCCEEDED


def test_a_failing_step_is_retried_with_backoff_until_it_succeeds(
    session_factory: SessionFactory, rules_dir: Path, config: RunnerConfig, project: Path
) -> None:
    run = run_rule(session_factory, rules_dir, config, """
execution:
  kind: built-in
  actions:
    - {id: flaky, type: run-command, retry: 2, command: "echo x >> tries; test $(wc -l < tries) -ge 3"}
""")  # fmt: skip

    with session_factory() as session:
        (step,) = run_steps_db.list_steps(session, run.id)
    assert run.status == RunStatus.SUCCEEDED
    assert (project / "tries").read_text() == "x\nx\nx\n"
    assert step.result["attempts"] == 3


def test_always_run_steps_run_after_a_failure_and_keep_the_original_error(
    session_factory: SessionFactory, rules_dir: Path, config: RunnerConfig, project: Path
) -> None:
    run = run_rule(session_factory, rules_dir, config, """
execution:
  kind: built-in
  actions:
    - {id: build, type: run-command, command: "exit 4"}
    - {id: skipped, type: run-command, command: "touch never"}
    - {id: cleanup, type: run-command, command: "touch cleaned", always_run: true}
""")  # fmt: skip

    assert [(s[0], s[1]) for s in steps_of(session_factory, run.id)] == [
        ("build", "failed"),
        ("skipped", "skipped"),
        ("cleanup", "succeeded"),
    ]
    assert (project / "cleaned").exists() and not (project / "never").exists()
    assert run.status == RunStatus.FAILED
    assert run.error == "step 'build' (#1) failed: command exited with status 4"


def test_template_values_are_shell_quoted_so_inputs_cannot_inject_commands(
    session_factory: SessionFactory, rules_dir: Path, config: RunnerConfig, project: Path
) -> None:
    run = run_rule(session_factory, rules_dir, config, """
execution:
  kind: built-in
  actions:
    - {id: greet, type: run-command, command: "echo hello {{trigger.inputs.who}} on {{rule.name}}"}
""", who="$(touch pwned); `touch pwned2`")  # fmt: skip

    ((_, status, output),) = steps_of(session_factory, run.id)
    assert status == "succeeded"
    assert output == "hello $(touch pwned); `touch pwned2` on r\n"
    assert not (project / "pwned").exists() and not (project / "pwned2").exists()


def test_an_unknown_variable_at_run_time_fails_the_step_naming_it(
    session_factory: SessionFactory, rules_dir: Path, config: RunnerConfig
) -> None:
    # (An input the rule does not declare passes at load: a rule without declared inputs takes
    # any; a field no trigger of the rule gives is refused at load instead.)
    run = run_rule(session_factory, rules_dir, config, """
execution:
  kind: built-in
  actions: [{id: pr, type: run-command, command: "echo {{trigger.inputs.number}}"}]
""")  # fmt: skip

    assert run.status == RunStatus.FAILED
    assert "unknown variable trigger.inputs.number" in (run.error or "")


def test_secrets_resolve_on_the_worker_and_are_masked_everywhere(
    session_factory: SessionFactory, rules_dir: Path, config: RunnerConfig
) -> None:
    script = "import json, sys; t = sys.argv[1]; print(t); print(json.dumps({'t': t})); raise ValueError(t)"
    run = run_rule(session_factory, rules_dir, config, f"""
execution:
  kind: built-in
  actions:
    - id: leak
      type: run-command
      command: [{sys.executable!r}, -c, {script!r}, "${{env:DEPLOY_TOKEN}}"]
      continue_on_failure: true
""")  # fmt: skip

    with session_factory() as session:
        (step,) = run_steps_db.list_steps(session, run.id)
    stored = step.output + json.dumps(step.result) + (step.error or "")
    assert SECRET not in stored and "s3cr3t" not in stored
    assert step.output.count("***") >= 3  # plain, inside JSON, in the traceback


def test_a_missing_secret_fails_the_step_naming_the_variable(
    session_factory: SessionFactory, rules_dir: Path, config: RunnerConfig
) -> None:
    run = run_rule(session_factory, rules_dir, config, """
execution:
  kind: built-in
  actions: [{id: push, type: run-command, command: "echo ${env:NOT_SET_ANYWHERE}"}]
""")  # fmt: skip

    assert run.status == RunStatus.FAILED
    assert "NOT_SET_ANYWHERE" in (run.error or "")


def test_run_tests_turns_junit_xml_into_counts_findings_and_the_review_queue(
    session_factory: SessionFactory, rules_dir: Path, config: RunnerConfig, project: Path
) -> None:
    (project / "test_sample.py").write_text(
        "def test_ok():\n    assert True\n\ndef test_broken():\n    assert 1 == 2\n"
    )
    run = run_rule(session_factory, rules_dir, config, f"""
execution:
  kind: built-in
  actions:
    - id: tests
      type: run-tests
      command: "{sys.executable} -m pytest -q -p no:cacheprovider --junitxml=$ADE_JUNIT_XML test_sample.py"
""")  # fmt: skip

    with session_factory() as session:
        (step,) = run_steps_db.list_steps(session, run.id)
    assert (step.result["passed"], step.result["failed"], step.result["total"]) == (1, 1, 2)
    assert step.result["failing"] == ["test_sample::test_broken"]
    assert run.status == RunStatus.FAILED
    assert run.error is not None and "1 of 2 tests failed" in run.error
    assert run.findings is not None and run.findings[0]["test_id"] == "test_sample::test_broken"
    assert run.queue_status == QueueStatus.ACTIONABLE_FINDINGS


def test_later_steps_run_inside_the_lane_a_run_creates(
    session_factory: SessionFactory, rules_dir: Path, config: RunnerConfig, tmp_path: Path
) -> None:
    run = run_rule(session_factory, rules_dir, config, """
execution:
  kind: built-in
  actions:
    - {id: lane, type: create-lane, name: "fix {{rule.id}}", base: main}
    - {id: where, type: run-command, command: "pwd; git rev-parse --abbrev-ref HEAD"}
    - {id: root, type: run-command, command: "pwd", lane: project}
""")  # fmt: skip

    steps = steps_of(session_factory, run.id)
    with session_factory() as session:
        (lane,) = session.query(LaneRow).all()
    lane_path = os.path.realpath(tmp_path / "lanes" / "default" / "fix-r")
    assert run.status == RunStatus.SUCCEEDED
    assert (lane.name, lane.branch, lane.path, lane.status) == (
        "fix r",
        "ade/fix-r",
        lane_path,
        "active",
    )
    assert steps[1][2] == f"{lane_path}\nade/fix-r\n"
    assert steps[2][2] == f"{config.settings.project_root('default')}\n"


def test_changes_outside_allowed_paths_fail_the_run_and_name_the_files(
    session_factory: SessionFactory, rules_dir: Path, config: RunnerConfig
) -> None:
    run = run_rule(session_factory, rules_dir, config, """
guardrails: {allowed_paths: ["src/**"]}
execution:
  kind: built-in
  actions:
    - {id: lane, type: create-lane, name: edit, base: main}
    - {id: edit, type: run-command, command: "echo x >> src/app.py; mkdir -p srcx; echo y > srcx/evil.py; echo z > README"}
""")  # fmt: skip

    assert run.status == RunStatus.FAILED
    assert run.error is not None
    assert "outside the rule's allowed_paths (src/**): README, srcx/evil.py" in run.error
    assert "src/app.py" not in run.error


def test_a_lane_not_in_allowed_lanes_is_refused(
    session_factory: SessionFactory, rules_dir: Path, config: RunnerConfig, tmp_path: Path
) -> None:
    run = run_rule(session_factory, rules_dir, config, """
guardrails: {allowed_lanes: ["bot-*"]}
execution:
  kind: built-in
  actions: [{id: lane, type: create-lane, name: "main-hotfix", base: main}]
""")  # fmt: skip

    assert run.status == RunStatus.FAILED
    assert "allowed_lanes (bot-*)" in (run.error or "")
    assert not (tmp_path / "lanes" / "default").exists() or not any(
        (tmp_path / "lanes" / "default").iterdir()
    )


def test_predict_conflicts_lists_conflicting_files_as_findings(
    session_factory: SessionFactory, rules_dir: Path, config: RunnerConfig, project: Path
) -> None:
    run = run_rule(session_factory, rules_dir, config, """
execution:
  kind: built-in
  actions:
    - {id: lane, type: create-lane, name: feature, base: main}
    - {id: change, type: run-command, command: "echo lane > src/app.py && git -c user.name=a -c user.email=a@b commit -qam lane"}
    - {id: upstream, lane: project, type: run-command, command: "echo main > src/app.py && git -c user.name=a -c user.email=a@b commit -qam main"}
    - {id: predict, type: predict-conflicts}
""")  # fmt: skip

    with session_factory() as session:
        predict = run_steps_db.list_steps(session, run.id)[-1]
    assert run.status == RunStatus.SUCCEEDED, run.error
    assert predict.result["conflicts"] == ["src/app.py"]
    assert run.findings is not None
    assert [f["path"] for f in run.findings] == ["src/app.py"]
    assert run.queue_status == QueueStatus.ACTIONABLE_FINDINGS


def test_a_created_lane_triggers_the_rules_watching_lanes_of_that_name(
    session_factory: SessionFactory, rules_dir: Path, config: RunnerConfig
) -> None:
    watching = "execution: {kind: built-in, actions: [{type: run-command, command: 'true'}]}\n"
    add_rule(
        session_factory,
        rules_dir,
        "on-fix",
        "id: on-fix\ntriggers: [{type: lane.created, lanes: ['fix-*']}]\n" + watching,
    )
    add_rule(
        session_factory,
        rules_dir,
        "on-docs",
        "id: on-docs\ntriggers: [{type: lane.created, lanes: ['docs-*']}]\n" + watching,
    )
    sender = InMemorySender()
    with_sender = RunnerConfig(config.settings, config.executors, config.base_env, sender=sender)
    add_rule(session_factory, rules_dir, "r", "id: r\ntriggers: [{type: manual}]\n" + """
execution:
  kind: built-in
  actions: [{id: lane, type: create-lane, name: fix-login, base: main}]
""")  # fmt: skip
    run_id = dispatch(session_factory, sender, "r", TriggerEvent.manual()).run.id

    execute_run(session_factory, with_sender, run_id, "w1")

    with session_factory() as session:
        triggered = run_views_db.list_runs(
            session, run_views_db.RunFilter(trigger_type="lane.created")
        )[0]
    assert [(run.rule_id, run.trigger["lane"]["name"]) for run in triggered] == [
        ("on-fix", "fix-login")
    ]
    assert [rule for _, _, rule in sender.sent] == ["r", "on-fix"]


@pytest.mark.parametrize(
    "cwd",
    ["..", "../project", "/etc", "out", "chain", "../fix-rx"],
    ids=[
        "parent",
        "dotdot-into-project",
        "absolute",
        "symlink-out",
        "symlink-chain",
        "sibling-prefix",
    ],
)
def test_a_step_in_a_lane_cannot_leave_it(
    session_factory: SessionFactory, rules_dir: Path, config: RunnerConfig, tmp_path: Path, cwd: str
) -> None:
    lanes = Path(config.settings.lanes_dir("default"))
    (lanes / "fix-rx").mkdir(parents=True)  # a sibling whose name shares the lane's prefix
    run = run_rule(session_factory, rules_dir, config, f"""
execution:
  kind: built-in
  actions:
    - {{id: lane, type: create-lane, name: fix-r, base: main}}
    - {{id: links, type: run-command, command: "ln -s {tmp_path} out && ln -s out chain"}}
    - {{id: escape, type: run-command, cwd: "{cwd}", command: "touch escaped"}}
""")  # fmt: skip

    assert run.status == RunStatus.FAILED
    assert f"outside {lanes / 'fix-r'}" in (run.error or "")
    assert not list(tmp_path.rglob("escaped"))


def test_a_trigger_naming_a_lane_outside_the_lanes_directory_is_refused(
    session_factory: SessionFactory, rules_dir: Path, config: RunnerConfig, tmp_path: Path
) -> None:
    add_rule(session_factory, rules_dir, "r", "id: r\ntriggers: [{type: lane.created}]\n" + """
execution: {kind: built-in, actions: [{id: a, type: run-command, command: "touch here"}]}
""")  # fmt: skip
    lane = {"id": "x", "name": "evil", "branch": "b", "path": str(tmp_path)}
    event = TriggerEvent("lane.created", "forged", {"lane": lane}, "forged-1")
    run_id = dispatch(session_factory, InMemorySender(), "r", event).run.id

    execute_run(session_factory, config, run_id, "w1")

    with session_factory() as session:
        run = runs_db.get_run(session, run_id)
    assert run.status == RunStatus.FAILED
    assert "the trigger's lane path" in (run.error or "")
    assert not (tmp_path / "here").exists()


def test_create_lane_in_a_project_that_is_not_a_git_repository_fails_clearly(
    session_factory: SessionFactory, rules_dir: Path, config: RunnerConfig, project: Path
) -> None:
    shutil.rmtree(project / ".git")

    run = run_rule(session_factory, rules_dir, config, """
execution: {kind: built-in, actions: [{id: lane, type: create-lane, name: x}]}
""")  # fmt: skip

    assert run.status == RunStatus.FAILED
    assert "is not a git repository" in (run.error or "")


def test_templates_and_secrets_never_expand_each_other(
    session_factory: SessionFactory, rules_dir: Path, config: RunnerConfig
) -> None:
    tricky = RunnerConfig(
        config.settings, config.executors, {**config.base_env, "LOOKS_LIKE": "{{rule.id}}-x"}
    )
    add_rule(session_factory, rules_dir, "r", """
id: r
triggers: [{type: manual}]
inputs: {who: {type: string}}
execution:
  kind: built-in
  actions:
    - {id: a, type: run-command, command: ["echo", "${env:LOOKS_LIKE}", "{{trigger.inputs.who}}"]}
""")  # fmt: skip
    event = TriggerEvent.manual({"who": "${env:DEPLOY_TOKEN}"})
    run_id = dispatch(session_factory, InMemorySender(), "r", event).run.id

    execute_run(session_factory, tricky, run_id, "w1")

    ((_, status, output),) = steps_of(session_factory, run_id)
    assert status == "succeeded"
    assert output == "*** ${env:DEPLOY_TOKEN}\n"  # the secret is masked, the input stays text
