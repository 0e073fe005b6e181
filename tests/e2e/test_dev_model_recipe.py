"""docs/recipes/try-an-agent-step.md as written: `ade-tasks dev-model` and `ade-tasks dev` as
subprocesses with the recipe's variables, its rule and its script, and `ade-tasks run --wait`."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import REPO, write_rule
from tests.e2e import test_dev
from tests.e2e.test_dev import Dev
from tests.support import BIN, Child, child_env, free_port, wait_until

RECIPE = (REPO / "docs" / "recipes" / "try-an-agent-step.md").read_text()
YAML = re.findall(r"```yaml\n(.*?)```", RECIPE, re.S)
SH = re.findall(r"```sh\n(.*?)```", RECIPE, re.S)

workdir, dev = test_dev.workdir, test_dev.dev  # `ade-tasks dev` in a clone's directory


class DevModel:
    """The recipe's `ade-tasks dev-model` command line, on a free port."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.port = free_port()
        self.child: Child | None = None

    def start(self, command: str) -> None:
        argv = shlex.split(command)
        assert argv[:2] == ["ade-tasks", "dev-model"], command
        self.stop()
        self.child = Child(
            [str(BIN / "ade-tasks"), *argv[1:], "--port", str(self.port)],
            child_env({}),
            self.directory / f"dev-model-{self.port}.log",
            cwd=self.directory,
        )
        wait_until(self._listening, 15, f"ade-tasks dev-model to serve (log: {self.child.log})")

    def _listening(self) -> bool:
        try:
            return httpx.get(f"http://127.0.0.1:{self.port}/").status_code == 404
        except httpx.TransportError:
            return False

    def stop(self) -> None:
        if self.child is not None:
            self.child.stop()
            self.child = None


@pytest.fixture
def model(workdir: Path) -> Iterator[DevModel]:
    server = DevModel(workdir)
    yield server
    server.stop()


def test_the_recipe_runs_an_agent_step_against_the_dev_model(model: DevModel, dev: Dev) -> None:
    # Given a project, the recipe's rule, and its dev model (step 1)
    (dev.workdir / "README.md").write_text("a project to look at\n")
    rule = next(block for block in YAML if block.startswith("id: try-agent"))
    write_rule(dev.workdir / "config" / "rules", "try-agent.yaml", rule)
    start_model, exports, run, start_scripted = (
        next(b for b in SH if b.strip() == "ade-tasks dev-model"),
        next(b for b in SH if "export" in b),
        next(b for b in SH if b.startswith("ade-tasks run ")),
        next(b for b in SH if "--script" in b),
    )
    model.start(start_model)

    # And `ade-tasks dev` with the recipe's two variables, the port moved to the free one (step 2)
    variables = dict(re.findall(r"^export (\w+)=(\S+)$", exports, re.M))
    assert variables.keys() == {
        "ADE_PROVIDERS__ANTHROPIC__BASE_URL",
        "ADE_PROVIDERS__ANTHROPIC__API_KEY",
    }
    variables["ADE_PROVIDERS__ANTHROPIC__BASE_URL"] = variables[
        "ADE_PROVIDERS__ANTHROPIC__BASE_URL"
    ].replace(":8765", f":{model.port}")
    dev.env.update(variables)
    dev.start()

    # When the recipe's run command runs (step 4)
    ran = dev.cli(*shlex.split(run)[1:])

    # Then the run succeeded with the default script's summary of the worktree's listing
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "succeeded" in ran.stdout, ran.stdout
    summary = "Summary from ade-tasks dev-model, a scripted stand-in (not a model): I looked around"
    assert summary in ran.stdout and "README.md" in ran.stdout, ran.stdout  # the key masks no word
    assert "agent step finished" in ran.stdout, ran.stdout

    # When the dev model restarts with the recipe's script (step 5) and the rule runs again
    (dev.workdir / "turns.yaml").write_text(next(b for b in YAML if b.startswith("turns:")))
    model.start(start_scripted)
    again = dev.cli(*shlex.split(run)[1:])

    # Then the step read the rule file through the engine's tool and ended with the scripted text
    assert again.returncode == 0, again.stdout + again.stderr
    assert "Scripted: the rule file is there and reads well." in again.stdout, again.stdout
    run_id = again.stdout.split()[1].rstrip(":")
    events = dev.cli("runs", "events", run_id)
    assert "read_file" in events.stdout, events.stdout
