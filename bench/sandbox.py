"""Sandbox benchmark: what the bubblewrap sandbox costs the processes it holds, against the same
process without it, in one run (interleaved, so the machine's drift reaches both sides).

(a) A `true` command through `run_process` (the path an HTTP session's `bash` takes, with its
    supervisor and output capture), `--commands` times each way: p50 and p99.
(b) A `run-command: [true]` step through its executor (`run_command`: the step's sandbox, its
    environment, the supervisor, the outcome), `--commands` times each way (the other way with
    `ADE_SANDBOX=off`): p50 and p99.
(c) An agent session's start and end: a one-text-turn session of the real Claude Code and Codex
    CLIs through the engine (`run_cli_session`: model proxy, private home, decision socket), on a
    scripted model server on 127.0.0.1, `--sessions` times each way: medians.

Needs bubblewrap and the pinned CLIs (`make test` installs both). From the repository root:

    .venv/bin/python bench/sandbox.py [--commands 200] [--sessions 7]
"""

from __future__ import annotations

import sys as _sys
from pathlib import Path as _Path

if __package__ in (None, ""):  # run as `python bench/sandbox.py`: import from the repository
    _sys.path.insert(0, str(_Path(__file__).resolve().parent.parent))

import argparse
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ade_api import dev_model as fake_anthropic
from ade_tasks.rules.rule import Rule
from ade_tasks.rules.steps import RunCommandAction
from ade_tasks.settings import Settings
from ade_workers.actions.executor import StepContext
from ade_workers.actions.run_command import run_command
from ade_workers.containment.process import run_process
from ade_workers.engine.chain import ChainState, template_context
from ade_workers.sandbox.engine import agent_sandbox
from ade_workers.sandbox.layout import Sandbox
from bench.agent_cli import CLIS, engine_session, ms
from bench.common import BenchError, percentile
from tests import fake_responses


def command_times(worktree: Path, sandbox: Sandbox, count: int) -> tuple[list[float], list[float]]:
    """Wall times of `true` through run_process in the sandbox and without, interleaved."""
    inside: list[float] = []
    outside: list[float] = []
    for _ in range(count):
        for layout, times in ((sandbox, inside), (None, outside)):
            started = time.perf_counter()
            result = run_process(
                ["true"], cwd=worktree, env={"PATH": "/usr/bin:/bin"}, timeout=30, sandbox=layout
            )
            times.append(time.perf_counter() - started)
            if result.exit_code != 0:
                raise BenchError(f"`true` exited {result.exit_code}: {result.output[-500:]}")
    return inside, outside


def step_times(worktree: Path, count: int) -> tuple[list[float], list[float]]:
    """Wall times of a `true` run-command step through its executor, sandboxed and with
    ADE_SANDBOX=off, interleaved."""
    rule = Rule.model_validate({
        "id": "bench", "triggers": [{"type": "manual"}],
        "execution": {"kind": "built-in", "actions": [
            {"id": "true", "type": "run-command", "command": ["true"]}
        ]},
    })  # fmt: skip
    assert rule.execution.kind == "built-in"
    action = rule.execution.actions[0]
    assert isinstance(action, RunCommandAction)
    inside: list[float] = []
    outside: list[float] = []
    contexts = [(_step_context(rule, worktree, Settings()), inside)]
    contexts.append((_step_context(rule, worktree, Settings(sandbox="off")), outside))
    for _ in range(count):
        for context, times in contexts:
            started = time.perf_counter()
            outcome = run_command(action, context)
            times.append(time.perf_counter() - started)
            if outcome.exit_code != 0:
                raise BenchError(f"the step failed: {outcome.error} {outcome.output[-500:]}")
    return inside, outside


def _step_context(rule: Rule, worktree: Path, settings: Settings) -> StepContext:
    return StepContext(
        run_id="bench", rule=rule, trigger={}, step_index=0, project_root=worktree,
        env_allowlist=settings.command_env_allowlist,
        base_env={"PATH": "/usr/bin:/bin", "HOME": str(worktree.parent / "home")},
        time_left=lambda: 60.0, should_stop=lambda: False, sessions=_no_database,
        settings=settings, sender=None, template=template_context(rule, {}, ChainState()),
        step_id="true",
    )  # fmt: skip


def _no_database() -> Any:
    raise BenchError("a run-command step opened a database session")


def session_times(
    sessions: int, script: Callable[[], None], run: Callable[[Sandbox | None], object],
    sandbox: Sandbox,
) -> tuple[float, float]:  # fmt: skip
    """Median wall time of a session in the sandbox and without, interleaved."""
    inside: list[float] = []
    outside: list[float] = []
    for _ in range(sessions):
        for layout, times in ((sandbox, inside), (None, outside)):
            script()
            started = time.perf_counter()
            run(layout)
            times.append(time.perf_counter() - started)
    return statistics.median(inside), statistics.median(outside)


def report(label: str, inside: float, outside: float) -> None:
    print(
        f"  {label:<30} sandbox {ms(inside):>9}  without {ms(outside):>9}  "
        f"+{ms(inside - outside):>8}  ratio {inside / outside:4.2f}x",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commands", type=int, default=200)
    parser.add_argument("--sessions", type=int, default=7)
    args = parser.parse_args()
    claude, codex = CLIS / "claude", CLIS / "codex"
    with tempfile.TemporaryDirectory(prefix="bench-sandbox-") as scratch:
        worktree = Path(scratch) / "wt"
        worktree.mkdir()
        subprocess.run(["git", "init", "-q", str(worktree)], check=True)
        sandbox = agent_sandbox(Settings(), worktree, "the benchmark")
        if sandbox is None:
            raise BenchError("ADE_SANDBOX=off: nothing to measure")

        print(f"(a) `true` through run_process, {args.commands} each way:", flush=True)
        inside, outside = command_times(worktree, sandbox, args.commands)
        for q in (50, 99):
            report(f"p{q}", percentile(inside, q), percentile(outside, q))

        print(f"(b) a `true` run-command step, {args.commands} each way:", flush=True)
        inside, outside = step_times(worktree, args.commands)
        for q in (50, 99):
            report(f"p{q}", percentile(inside, q), percentile(outside, q))

        print(f"(c) one-turn agent sessions, {args.sessions} each way, medians:", flush=True)
        with fake_anthropic.ScriptedAnthropic() as server:
            report("claude-code", *session_times(
                args.sessions, lambda: server.script(fake_anthropic.Turn.text("done")),
                lambda layout: engine_session("claude-code", claude, server.url, worktree, False,
                                              layout),
                sandbox,
            ))  # fmt: skip
        with fake_responses.ScriptedResponsesServer() as responses:
            url = f"{responses.url}/v1"
            report("codex", *session_times(
                args.sessions, lambda: responses.script(fake_responses.Turn.text("done")),
                lambda layout: engine_session("codex", codex, url, worktree, False, layout),
                sandbox,
            ))  # fmt: skip


if __name__ == "__main__":
    try:
        main()
    except BenchError as exc:
        raise SystemExit(f"bench failed: {exc}") from None
