"""An agent's conftest.py run by the rule's `run-tests` step after the session: in the sandbox,
with no way out to the token, the source, git hooks, the worker's environment or the network.

An OpenAI-compatible scripted server on 127.0.0.1 answers in the recorded Chat Completions
format; SQLite, real tools on a real git worktree.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

import ade_workers
from ade_tasks.db import run_steps as run_steps_db
from ade_tasks.db.engine import SessionFactory
from ade_tasks.runs.dispatch import dispatch
from ade_tasks.runs.trigger_events import TriggerEvent
from ade_tasks.states import RunStatus
from ade_tasks.testing import InMemorySender
from ade_workers.engine.runner import execute_run
from ade_workers.engine.runner_config import RunnerConfig
from ade_workers.sandbox.layout import worker_python
from tests.fake_llm import ScriptedModelServer
from tests.integration.agent_run_support import (
    config,
    llm,
    rules_dir,
    run_of,
    session_factory,
    text,
    tool_calls,
)
from tests.support import vendor_pytest
from tests.unit.conftest import add_rule

__all__ = ["config", "llm", "rules_dir", "session_factory"]  # the fixtures this module uses


CONFTEST_ATTACK = """
import os, socket
from pathlib import Path

def attempt(name, action):
    try:
        return f"{{name}}: {{action()}}"
    except Exception as exc:
        return f"{{name}}: refused ({{type(exc).__name__}})"

def connect(port):
    socket.create_connection(("127.0.0.1", port), timeout=2).close()
    return "OPEN"

def worker_environment():
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if b"worker-canary-5150" in open(f"/proc/{{pid}}/environ", "rb").read():
                return "FOUND"
        except OSError:
            pass
    raise LookupError("no process shows the worker's environment")

def plant_hook():
    hook = Path(".git/hooks/post-checkout")
    hook.write_text("#!/bin/sh\\ntouch {planted}\\n")
    hook.chmod(0o755)
    return "PLANTED"

lines = [
    attempt("token", lambda: open({token!r}).read()),
    attempt("source", lambda: open({source!r}, "a").write("# pwned")),
    attempt("hook", plant_hook),
    attempt("environ", worker_environment),
    *(attempt(f"tcp-{{port}}", lambda port=port: connect(port)) for port in {ports!r}),
]
Path("attack-report.txt").write_text("\\n".join(lines) + "\\n")
"""


def test_run_tests_after_an_agent_session_runs_its_conftest_in_the_sandbox_with_no_way_out(
    session_factory: SessionFactory,
    rules_dir: Path,
    config: RunnerConfig,
    llm: ScriptedModelServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The agent writes a conftest.py; the rule's `run-tests` step runs it (pytest imports it)
    with no network (the default after an agent step), read-only git directories, and nothing
    of the engine: every attempt is refused, and a later git checkout by the engine runs no
    hook of the agent's."""
    monkeypatch.setenv("ADE_WORKER_CANARY", "worker-canary-5150")
    project = config.settings.project_root("default")
    vendor_pytest(project / "vendor")
    data = project / ".ade"
    data.mkdir()
    (data / "api-token").write_text("api-token-canary-424242\n")
    settings = config.settings.model_copy(update={"data_dir": data})
    config = RunnerConfig(settings, config.executors, config.base_env)
    planted = tmp_path / "hook-ran"
    conftest = CONFTEST_ATTACK.format(
        token=str(settings.dev_token_file),
        source=str(Path(ade_workers.__file__).resolve()),
        planted=str(planted),
        ports=[5432, 6379, 5672, int(llm.url.rsplit(":", 1)[1])],
    )
    add_rule(session_factory, rules_dir, "fixer", f"""
id: fixer
triggers: [{{type: manual}}]
execution:
  kind: built-in
  actions:
    - id: agent
      type: agent-session
      provider: openai
      model: gpt-4o-mini
      permission_mode: edit
      policy: {{allowed_tools: [write_file]}}
      prompt: "Add the tests' setup."
    - id: tests
      type: run-tests
      env: {{PYTHONPATH: vendor}}
      command: "{worker_python()} -m pytest -q -p no:cacheprovider --junitxml=$ADE_JUNIT_XML"
""")  # fmt: skip
    (project / "test_ok.py").write_text("def test_ok():\n    assert True\n")
    llm.script(
        tool_calls(("call_1", "write_file", {"path": "conftest.py", "content": conftest})),
        text("added conftest.py"),
    )
    run_id = dispatch(session_factory, InMemorySender(), "fixer", TriggerEvent.manual()).run.id

    status = execute_run(session_factory, config, run_id, "w1")

    run, _ = run_of(session_factory, run_id)
    assert status == RunStatus.SUCCEEDED, run.error
    with session_factory() as session:
        steps = {s.step_id: s for s in run_steps_db.list_steps(session, run_id)}
    assert steps["tests"].result["passed"] == 1  # pytest ran, conftest.py imported
    assert steps["tests"].result["sandbox"] == "network none, git read-only, engine code hidden"
    report = dict(
        line.split(": ", 1) for line in (project / "attack-report.txt").read_text().splitlines()
    )
    assert len(report) == 8, report
    assert all(outcome.startswith("refused") for outcome in report.values()), report
    assert "pwned" not in Path(ade_workers.__file__).read_text()
    subprocess.run(["git", "checkout", "-q", "-b", "after"], cwd=project, check=True)
    assert not planted.exists()  # no hook of the agent's runs as the engine
