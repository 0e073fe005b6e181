"""What `ade-tasks dev` tells a newcomer at its console: a CLI command that works in a new shell,
one line per run start and end, rule files reloaded as they are saved, and a cancel that stops
the command at once without alarming warnings."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

from tests.conftest import write_rule
from tests.e2e.test_dev import Dev, dev, workdir  # noqa: F401  (the dev harness and fixtures)
from tests.support import BIN, host_pid, pid_alive, wait_until


def new_shell(command: str, cwd: Path, home: Path) -> subprocess.CompletedProcess[str]:
    """`command` in a fresh bash with no venv, no profile and only the system's PATH."""
    return subprocess.run(
        ["bash", "--noprofile", "--norc", "-c", command],
        cwd=cwd,
        env={"PATH": "/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8"},
        capture_output=True,
        text=True,
        timeout=60,
    )


def banner_hint(output: str) -> tuple[Path, str, str]:
    """The directory, the try-it command and the PATH line the banner shows."""
    lines = [line.strip() for line in output.splitlines()]
    at = next(i for i, line in enumerate(lines) if line.startswith("try it in another shell"))
    where = re.search(r"in this directory \((.+)\):$", lines[at])
    assert where, lines[at]
    path_line = next(line for line in lines if line.startswith("export PATH="))
    return Path(where.group(1)), lines[at + 1], path_line


def test_the_banner_shows_commands_that_work_in_a_new_shell(dev: Dev, tmp_path: Path) -> None:  # noqa: F811
    # Given dev started as a newcomer starts it
    child = dev.start()
    where, command, path_line = banner_hint(child.output())
    assert "ade-tasks run hello --wait" in command

    # When the shown command is pasted into a new shell in the directory the banner names
    ran = new_shell(command, where, tmp_path)

    # Then it reaches this stack and runs the rule
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "succeeded" in ran.stdout
    # And the PATH line puts exactly this CLI on the PATH of a new shell
    found = new_shell(f"{path_line}; command -v ade-tasks", where, tmp_path)
    assert found.stdout.strip() == str(BIN / "ade-tasks"), found.stdout + found.stderr


def console_line(dev_output: str, rule: str, run_id: str, status: str) -> str | None:
    pattern = rf"^\d\d:\d\d:\d\d run {rule} {run_id[:8]} {status}( \(\d+\.\d+s\))?$"
    found = re.search(pattern, dev_output, re.MULTILINE)
    return found.group(0) if found else None


def test_the_console_prints_a_line_per_run_start_and_end(dev: Dev) -> None:  # noqa: F811
    child = dev.start()
    ran = dev.cli("run", "hello", "--wait")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    run_id = ran.stdout.split()[1].rstrip(":")
    assert wait_until(lambda: console_line(child.output(), "hello", run_id, "started"), 5, "start")
    ended = wait_until(
        lambda: console_line(child.output(), "hello", run_id, "succeeded"), 5, "the end line"
    )
    assert ended.endswith("s)"), ended


def test_a_cancel_in_dev_stops_the_command_at_once_and_says_so(dev: Dev, workdir: Path) -> None:  # noqa: F811
    # Given a long command running in dev (the default 15 s heartbeat)
    child = dev.start()
    started = dev.cli("run", "slow")
    run_id = started.stdout.split()[1].rstrip(":")
    pid_file = workdir / "slow.pid"
    pid = wait_until(
        lambda: pid_file.exists() and host_pid(int(pid_file.read_text()), child.proc.pid),
        20,
        "the command",
    )

    # When the operator cancels it from the CLI
    began = time.monotonic()
    cancelled = dev.cli("runs", "cancel", run_id)
    assert cancelled.returncode == 0, cancelled.stdout + cancelled.stderr

    # Then the command is gone within a bounded moment (before: the next heartbeat, up to 15 s)
    wait_until(lambda: not pid_alive(pid), 3, "the cancelled command to stop")
    print(f"dev: cancel -> command gone in {time.monotonic() - began:.2f}s")
    # And the console says the run ended cancelled, with no warning about a lost lease
    wait_until(lambda: console_line(child.output(), "slow", run_id, "cancelled"), 5, "end line")
    output = child.output()
    assert "WARNING" not in output and "lost its lease" not in output, output


NEW_RULE = """
id: fresh
triggers: [{type: manual}]
execution:
  kind: built-in
  actions: [{id: say, type: run-command, command: "echo %s"}]
"""


def test_dev_reloads_rule_files_as_they_change_and_keeps_the_last_good_rule(
    dev: Dev,  # noqa: F811
    workdir: Path,  # noqa: F811
) -> None:
    child = dev.start()
    rules = workdir / "config" / "rules"

    # When a new rule file is saved, dev syncs it and says so; the rule runs without a restart
    write_rule(rules, "fresh.yaml", NEW_RULE % "first")
    wait_until(lambda: "rules: added fresh" in child.output(), 10, "the new rule to be added")
    ran = dev.cli("run", "fresh", "--wait")
    assert ran.returncode == 0 and "first" in ran.stdout, ran.stdout + ran.stderr

    # When the file is broken, each problem gets a line and the last good rule stays in use
    (rules / "fresh.yaml").write_text("id: fresh\ntriggers: [{type: manual}]\nexecution: 7\n")
    wait_until(lambda: re.search(r"rule problem: .*fresh\.yaml", child.output()), 10, "the problem")
    assert "every rule keeps its last good version" in child.output()
    still = dev.cli("run", "fresh", "--wait")
    assert still.returncode == 0 and "first" in still.stdout, still.stdout + still.stderr

    # When it is fixed with a change, the rule is updated; when deleted, removed
    write_rule(rules, "fresh.yaml", NEW_RULE % "second")
    wait_until(lambda: "rules: updated fresh" in child.output(), 10, "the rule to be updated")
    wait_until(lambda: "loads again" in child.output(), 5, "the all-clear")
    again = dev.cli("run", "fresh", "--wait")
    assert again.returncode == 0 and "second" in again.stdout, again.stdout + again.stderr
    (rules / "fresh.yaml").unlink()
    wait_until(lambda: "rules: removed fresh" in child.output(), 10, "the rule to be removed")
    gone = dev.cli("run", "fresh")
    assert gone.returncode == 1 and "rule 'fresh' does not exist" in gone.stderr
