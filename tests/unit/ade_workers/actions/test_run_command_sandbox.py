"""`run-command` and `run-tests` steps run in the engine's sandbox, attacked as a hostile command
would attack it: the escape corpus (`tests/sandbox_escapes.py`), the network a step gets, a
report that links to the engine's token, a disk the step fills, and a host with no sandbox."""

from __future__ import annotations

import os
import re
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from ade_tasks.db import run_steps as run_steps_db
from ade_tasks.db.engine import SessionFactory
from ade_tasks.db.schema import RunStepRow
from ade_tasks.rules.loader import parse_rule
from ade_tasks.rules.rule import Rule
from ade_tasks.rules.steps import RunCommandAction, RunTestsAction
from ade_tasks.states import RunStatus
from ade_workers.engine.runner_config import RunnerConfig
from ade_workers.sandbox import host
from tests.sandbox_escapes import Target, check_escapes, escape_script
from tests.unit.ade_workers.engine.test_chain import run_rule

TOKEN = "ade-token-canary-9876543210"


@pytest.fixture
def engine(config: RunnerConfig, project: Path) -> RunnerConfig:
    """The runner, its data directory inside the project (the `make dev` layout) holding an API
    token file."""
    data = project / ".ade"
    data.mkdir()
    (data / "api-token").write_text(TOKEN + "\n")
    return replace(config, settings=config.settings.model_copy(update={"data_dir": data}))


@pytest.fixture
def listening() -> Iterator[int]:
    """A port that listens on the host's loopback."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        yield server.getsockname()[1]


def only_step(session_factory: SessionFactory, run_id: str) -> RunStepRow:
    with session_factory() as session:
        (step,) = run_steps_db.list_steps(session, run_id)
        session.expunge(step)
    return step


def test_a_command_step_escapes_nothing(session_factory, rules_dir, engine, listening):
    target = Target.of_this_process(engine.settings.dev_token_file, (listening,))
    run = run_rule(session_factory, rules_dir, engine, f"""
execution:
  kind: built-in
  actions:
    - {{id: attack, type: run-command, network: none, command: [bash, -c, {escape_script(target)!r}]}}
""")  # fmt: skip
    step = only_step(session_factory, run.id)
    check_escapes(step.output, target)
    assert step.result["sandbox"] == "network none, git read-write, engine code read-only"


def test_a_step_reaches_the_hosts_network_by_default_and_none_when_it_says_so(
    session_factory, rules_dir, config, listening
):
    tcp = f"(echo > /dev/tcp/127.0.0.1/{listening}) 2>/dev/null && echo OPEN || echo CLOSED"
    probe = ["bash", "-c", tcp]  # /dev/tcp is bash's
    run = run_rule(session_factory, rules_dir, config, f"""
execution:
  kind: built-in
  actions:
    - {{id: default, type: run-command, command: {probe!r}}}
    - {{id: none, type: run-command, network: none, command: {probe!r}}}
    - {{id: home, type: run-command, command: 'test -e ~/gitconfig || echo own; echo kept > ~/f; cat ~/f'}}
""")  # fmt: skip
    assert run.status == RunStatus.SUCCEEDED, run.error
    with session_factory() as session:
        steps = {s.step_id: s for s in run_steps_db.list_steps(session, run.id)}
    assert steps["default"].output.strip() == "OPEN"
    assert steps["none"].output.strip() == "CLOSED"
    # $HOME (the worker's holds a gitconfig) is a writable directory of the sandbox's own.
    assert steps["home"].output.split() == ["own", "kept"]
    assert not (Path(config.base_env["HOME"]) / "f").exists()
    assert steps["default"].result["sandbox"] == "network host, git read-write, engine code read-only"


def test_a_junit_report_linked_to_the_engines_token_is_refused(
    session_factory, rules_dir, engine
):
    # The link is made inside the sandbox, where the token file is hidden; the engine reads the
    # report outside, after the container emptied (nothing is left to swap the path then), and
    # refuses a report in its own data even where that lies inside the worktree.
    token = engine.settings.dev_token_file
    run = run_rule(session_factory, rules_dir, engine, f"""
execution:
  kind: built-in
  actions: [{{id: t, type: run-tests, command: "ln -s {token} report.xml", junit: [report.xml]}}]
""")  # fmt: skip
    step = only_step(session_factory, run.id)
    assert run.status == RunStatus.FAILED
    assert TOKEN not in (step.output + (step.error or "") + str(step.result))
    assert "junit 'report.xml'" in (step.error or "") and "data directory" in (step.error or "")


@pytest.mark.skipif(os.geteuid() != 0 and not os.environ.get("CI"), reason="mounts need root")
def test_a_step_that_fills_its_worktrees_disk_fails_cleanly_and_the_next_run_works(
    session_factory, rules_dir, config, project
):
    # A worktree on a disk of its own (8 MiB): the step gets ENOSPC, the run fails with the
    # command's status, and the engine (its data on another disk) goes on.
    small = project / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(small)], check=True)
    try:
        fill = "head -c 64M /dev/zero > big; echo exit-$?; df -k . | tail -1"
        run = run_rule(session_factory, rules_dir, config, f"""
execution:
  kind: built-in
  actions: [{{id: fill, type: run-command, cwd: small, command: {fill!r}}}]
""")  # fmt: skip
        step = only_step(session_factory, run.id)
        assert "No space left on device" in step.output and "exit-1" in step.output
        after = run_rule(session_factory, rules_dir, config, """
execution: {kind: built-in, actions: [{id: ok, type: run-command, command: "echo fine"}]}
""")  # fmt: skip
        assert after.status == RunStatus.SUCCEEDED, after.error
    finally:
        subprocess.run(["umount", "--lazy", str(small)], check=True)


def test_without_a_sandbox_a_step_is_refused_saying_what_the_host_needs(
    session_factory, rules_dir, config, monkeypatch, tmp_path
):
    host.sandbox_problem.cache_clear()
    monkeypatch.setenv("PATH", str(tmp_path))  # no bwrap on the worker's PATH
    try:
        run = run_rule(session_factory, rules_dir, config, """
execution: {kind: built-in, actions: [{id: s, type: run-command, command: [/bin/true]}]}
""")  # fmt: skip
    finally:
        host.sandbox_problem.cache_clear()
    assert run.status == RunStatus.FAILED
    assert run.error is not None and "step 's' runs only in a sandbox" in run.error
    assert "apt-get install bubblewrap" in run.error and "ADE_SANDBOX=off" in run.error


def test_an_admins_opt_out_runs_the_step_unsandboxed_and_says_so(
    session_factory, rules_dir, config
):
    off = replace(config, settings=config.settings.model_copy(update={"sandbox": "off"}))
    run = run_rule(session_factory, rules_dir, off, """
execution: {kind: built-in, actions: [{id: s, type: run-command, command: "echo $$"}]}
""")  # fmt: skip
    step = only_step(session_factory, run.id)
    assert run.status == RunStatus.SUCCEEDED, run.error
    assert step.result["sandbox"] == "off"
    assert int(step.output) > 3  # a pid of the host's, not a sandbox's own namespace


DOC = Path(__file__).resolve().parents[4] / "docs" / "actions.md"
#: The page's YAML blocks (tests/unit/docs/yaml_examples.py validates each as what it is).
EXAMPLES = re.findall(r"```yaml\n(.*?)```", DOC.read_text(), re.S)


def test_the_sandbox_example_runs_its_tests_without_network_after_the_agent():
    (rule,) = [
        parse_rule(yaml.safe_load(block), "docs/actions.md")
        for block in EXAMPLES
        if "fix-and-test" in block
    ]
    assert isinstance(rule, Rule) and rule.execution.kind == "built-in"
    steps = {step.id: step for step in rule.execution.actions}
    assert isinstance(steps["tests"], RunTestsAction) and steps["tests"].network is None
    assert isinstance(steps["report"], RunCommandAction) and steps["report"].network == "host"
