"""The `bash` tool: a shell command in the worktree, in a container of its own (so everything
it starts dies with it) and the session's sandbox (no network, nothing of the engine, only the
worktree writable), with a deadline, capped output and the masker on that output."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from ade_tasks.json_document import JsonObject
from ade_workers.agents.tools.tool import (
    STRING,
    ToolContext,
    ToolError,
    ToolResult,
    ToolSpec,
    spec,
)
from ade_workers.containment.process import run_process

BASH_OUTPUT_CAP = 30_000
SUPERVISOR_KILLED = (
    "[the command killed its supervisor (its parent process): how it ended is unknown; the "
    "sandbox ended with it, and nothing it started is left]"
)
BASH_DEFAULT_TIMEOUT = 120.0


def bash(args: JsonObject, ctx: ToolContext) -> ToolResult:
    """Run a shell command in the worktree, in a container of its own, with a deadline."""
    left = ctx.time_left()
    if left <= 0:
        raise ToolError("the session has no time left to run commands")
    timeout = min(float(args.get("timeout_sec", BASH_DEFAULT_TIMEOUT)), left)
    if timeout <= 0:
        raise ToolError("timeout_sec must be positive")
    shell = shutil.which("bash", path=ctx.env.get("PATH")) or "/bin/sh"
    try:
        result = run_process(
            [shell, "-c", args["command"]],
            cwd=Path(os.path.realpath(ctx.worktree)),
            env=ctx.env,
            timeout=timeout,
            kill_grace=ctx.kill_grace,
            should_stop=ctx.should_stop,
            cap=BASH_OUTPUT_CAP,
            masker=ctx.masker,
            user=ctx.user.ids if ctx.user else None,
            sandbox=ctx.sandbox,
        )
    except ChildProcessError:  # it killed its supervisor, which lives in its sandbox
        lost: JsonObject = {"exit_code": None, "timed_out": False, "cancelled": False}
        return ToolResult(False, SUPERVISOR_KILLED, lost)
    if result.timed_out:
        footer = f"[timed out after {timeout:g}s; everything the command started was killed]"
    elif result.cancelled:
        footer = "[cancelled; everything the command started was killed]"
    else:
        footer = f"[exit code {result.exit_code}]"
    data = {
        "exit_code": result.exit_code,
        "timed_out": result.timed_out,
        "cancelled": result.cancelled,
        "duration": round(result.duration, 3),
    }
    content = f"{result.output.rstrip()}\n{footer}".lstrip("\n")
    return ToolResult(result.exit_code == 0, content, data)


SPECS: dict[str, ToolSpec] = {
    "bash": spec(
        "Run a shell command in the worktree; output is capped and secrets are masked.",
        ["command"],
        command=STRING,
        timeout_sec={"type": "number", "exclusiveMinimum": 0},
    ),
}
"""The spec of `bash`, as providers send it to the model."""
