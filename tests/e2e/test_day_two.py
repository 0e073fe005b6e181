"""docs/day-two.md run as written (issue 37): every `sh` block of the page, in order, through the
real `ade-tasks` CLI in a reader's checkout, against one `ade-tasks dev` on PostgreSQL and Redis.

The page is read when the test runs, so what runs is what the page says today. The reader
substitutes only what the page leaves to them: their cluster's addresses in the checkout's
`.env`, an admin token in `ADE_API_TOKEN`, and their own run's short id for the page's
`1a2b3c4d`. A `yaml` block whose first line names a file (`# config/rules/nightly-tests.yaml`) is
written there in the checkout when the page reaches it, as the reader adds it. Every command
must exit 0 and print what the page says it shows (`SHOWS`); a command the page gains needs its
entry there, and an entry whose command the page dropped fails too.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.e2e.test_dev import Dev
from tests.support import BIN, child_env
from tests.tracked import copy_tracked
from tests.unit.docs.cli_examples import shell_lines
from tests.unit.docs.doc_pages import read_markdown

PAGE = REPO / "docs" / "day-two.md"
#: The run id the page shows; the reader types their own run's short id instead.
EXAMPLE_RUN_ID = "1a2b3c4d"
#: A `yaml` block that is a file of the reader's checkout: its first line names it.
FILE_BLOCK = re.compile(r"\A# (?P<path>[\w./-]+\.ya?ml)\n")
#: A run's id as `ade-tasks run` first prints it.
STARTED_RUN = re.compile(r"^run (?P<id>[0-9a-f-]{36}): ", re.MULTILINE)

#: What each command of the page (as written, its comment left out) prints, by what the page
#: says it shows: patterns searched line by line in its output.
SHOWS: dict[str, list[str]] = {
    "ade-tasks providers": [r"^this shell ", r"^the cluster \(as its API at \S+ sees it"],
    "ade-tasks settings": [r"^setting +this shell +the cluster ", r"^ADE_\w+ +\* "],
    "ade-tasks doctor": [r"^workers +ok ", r"^beats +ok ", r"^all \d+ checks passed$"],
    "ade-tasks rules validate config/rules": [r"^\d+ valid rules in \d+ files, 0 problems$"],
    "ade-tasks rules push config/rules --dry-run": [
        r"^\+ added +nightly-tests$",
        r"^dry run \(1 added, 0 updated, 0 removed\); nothing was applied$",
    ],
    "ade-tasks rules push config/rules": [r"^pushed config/rules: 1 added, 0 updated, 0 removed"],
    "ade-tasks rules versions nightly-tests": [
        r"^v1 +\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d +created +\w+ +dev +\(config/rules/nightly-tests"
    ],
    "ade-tasks run nightly-tests --wait": [r"\| 1 passed", r"^run \S+ succeeded after "],
    "ade-tasks runs logs 1a2b3c4d --follow": [
        r"^==> step 1 tests \(run-tests\) started$",
        r"^1 passed",
        r"^run \S+ succeeded$",
    ],
    'ade-tasks rules pause nightly-tests --note "deploy freeze until Monday"': [
        r"^rule 'nightly-tests' is paused by dev since .*: deploy freeze until Monday;"
    ],
    "ade-tasks rules list": [r"^nightly-tests +v1 +paused +schedule,manual$"],
    "ade-tasks rules next nightly-tests": [
        r"^ +paused: .* by dev since .*: deploy freeze until Monday;",
        r"^ +\d{4}-\d\d-\d\d \d\d:\d\d local ",
    ],
    "ade-tasks rules resume nightly-tests": [r"^rule 'nightly-tests' resumed by dev; "],
}


@pytest.fixture
def dev_cluster(tmp_path: Path, database_url: str, redis_url: str) -> Iterator[Dev]:
    """Yesterday's cluster: `ade-tasks dev` on PostgreSQL and Redis serving the shipped rules, in
    a project whose tests pass."""
    home = tmp_path / "cluster"
    copy_tracked(REPO / "config", home / "config")
    (home / "test_smoke.py").write_text("def test_smoke():\n    assert True\n")
    dev = Dev(home)
    dev.env.update(ADE_DATABASE_URL=database_url, ADE_BROKER_URL=redis_url)
    try:
        dev.start()
        yield dev
    finally:
        if dev.child is not None:
            dev.child.stop()


def reader_shell(checkout: Path, cluster: Dev) -> dict[str, str]:
    """The reader's checkout and shell: the team's rules, a `.env` naming the cluster (read by
    the CLI, as the page says), the admin token in the environment, the CLI on the PATH."""
    copy_tracked(REPO / "config", checkout / "config")
    names = ("ADE_DATABASE_URL", "ADE_BROKER_URL")
    settings = [f"ADE_API_URL={cluster.url}", *(f"{name}={cluster.env[name]}" for name in names)]
    (checkout / ".env").write_text("\n".join(settings) + "\n")
    token = (cluster.workdir / ".ade" / "api-token").read_text().strip()
    env = child_env({"PATH": f"{BIN}:{os.environ['PATH']}", "ADE_API_TOKEN": token})
    del env["ADE_ENV_FILE"]  # the checkout's `.env` is the reader's settings
    return env


def run_as_written(line: str, checkout: Path, env: dict[str, str], where: str) -> str:
    """Run a line of the page in the reader's shell; its output, once it exited 0."""
    result = subprocess.run(
        ["sh", "-c", line], cwd=checkout, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, f"{where}: $ {line}\n{result.stdout}{result.stderr}"
    return result.stdout


def test_the_day_two_page_runs_as_written(dev_cluster: Dev, tmp_path: Path) -> None:
    checkout = tmp_path / "checkout"
    env = reader_shell(checkout, dev_cluster)
    blocks, _ = read_markdown(PAGE)
    run_id, ran = "", set[str]()
    for block in blocks:
        if block.lang == "yaml" and (named := FILE_BLOCK.match(block.text)):
            assert ".." not in Path(named["path"]).parts, f"{block.file}:{block.line}: outside"
            (checkout / named["path"]).parent.mkdir(parents=True, exist_ok=True)
            (checkout / named["path"]).write_text(block.text)
        for number, line in shell_lines(block) if block.lang == "sh" else []:
            where = f"{block.file}:{number}"
            command = re.sub(r"\s+#.*$", "", line)
            assert command in SHOWS, f"{where}: add what `{command}` shows to SHOWS"
            if EXAMPLE_RUN_ID in line:
                assert run_id, f"{where}: the page uses a run id before it starts a run"
                line = line.replace(EXAMPLE_RUN_ID, run_id[:8])
            output = run_as_written(line, checkout, env, where)
            for pattern in SHOWS[command]:
                assert re.search(pattern, output, re.MULTILINE), (
                    f"{where}: no /{pattern}/ in\n{output}"
                )
            if started := STARTED_RUN.search(output):
                run_id = started["id"]
            ran.add(command)
    assert ran == set(SHOWS), f"SHOWS names commands the page no longer has: {set(SHOWS) - ran}"
