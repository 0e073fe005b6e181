"""`run-command`: a shell string or an argv list, inside the project or lane, under a timeout."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ade_tasks.errors import PolicyViolationError
from ade_tasks.json_document import JsonObject
from ade_tasks.paths import resolve_inside
from ade_tasks.rules.steps import CommandStep, Step
from ade_tasks.states import StepStatus
from ade_workers.actions.executor import StepContext, StepOutcome
from ade_workers.actions.live_output import LiveOutput, step_output_writer
from ade_workers.containment.process import OUTPUT_CAP, ProcessResult, run_process
from ade_workers.sandbox.engine import command_sandbox
from ade_workers.sandbox.host import SandboxUnavailable
from ade_workers.sandbox.layout import Network, Sandbox

#: With agent users, a worktree holds directories an agent wrote into: git run by a command
#: step (as the worker) must not take one for a bare repository whose config runs commands.
NO_BARE_DISCOVERY = {
    "GIT_CONFIG_COUNT": "1",
    "GIT_CONFIG_KEY_0": "safe.bareRepository",
    "GIT_CONFIG_VALUE_0": "explicit",
}


def child_env(context: StepContext, action: Step) -> dict[str, str]:
    """The allow-listed part of the worker's environment, the run's identity and manual inputs
    (`ADE_INPUT_<NAME>`), then the step's own variables."""
    env = {k: v for k, v in context.base_env.items() if k in context.env_allowlist}
    env["ADE_RUN_ID"] = context.run_id
    env["ADE_RULE_ID"] = context.rule.id
    for name, value in (context.trigger.get("inputs") or {}).items():
        key = "ADE_INPUT_" + re.sub(r"[^A-Za-z0-9_]", "_", str(name)).upper()
        env[key] = str(value).lower() if isinstance(value, bool) else str(value)
    if context.lane is not None:
        env["ADE_LANE_NAME"] = context.lane.name
        env["ADE_LANE_BRANCH"] = context.lane.branch
    if context.settings.agent_user:
        env.update(NO_BARE_DISCOVERY)
    env.update(getattr(action, "env", {}))  # an agent step has no env of its own
    return env


SUPERVISOR_KILLED = (
    "the command started, then its supervisor was killed before it ended (a command that "
    "kills its parent, `kill -9 $PPID`, does this), so how it ended is unknown"
)
SANDBOX_ENDED = "; its sandbox ended with it, and nothing it started is left"
UNSANDBOXED = (
    "; with ADE_SANDBOX=off what it started in the background may still run "
    "(docs/agents.md#security-model)"
)


@dataclass(frozen=True)
class StepSandbox:
    """How a command step is sandboxed: its layout (None: ADE_SANDBOX=off) and what it says."""

    layout: Sandbox | None
    network: Network
    untrusted: bool
    """May it run code an agent wrote (an agent-session step of its rule ran before it)?"""

    @property
    def details(self) -> dict[str, str]:
        if self.layout is None:
            return {"sandbox": "off"}
        if self.untrusted:
            return {"sandbox": f"network {self.network}, git read-only, engine code hidden"}
        return {"sandbox": f"network {self.network}, git read-write, engine code read-only"}


def step_sandbox(action: CommandStep, context: StepContext, env: Mapping[str, str]) -> StepSandbox:
    """The sandbox of a command step: after an agent-session step of the rule it may run code
    the agent wrote, so it gets no network unless the step asks, read-only git directories (the
    engine itself runs git there later) and none of the engine's code; otherwise the host's
    network, writable git and the engine's code read-only, for the rule author's `git fetch`,
    package installs and the `make dev` project's tests. SandboxUnavailable when none can be
    made and the settings require one."""
    steps = context.rule.execution.actions[: context.step_index]
    after_agent = any(step.type == "agent-session" for step in steps)
    network: Network = action.network or ("none" if after_agent else "host")
    layout = command_sandbox(
        context.settings,
        context.root,
        network=network,
        untrusted=after_agent,
        home=env.get("HOME"),
        what=f"step {action.id!r}",
    )
    return StepSandbox(layout, network, untrusted=after_agent)


@dataclass(frozen=True)
class CommandRun:
    """A finished command: its process result, the directory it ran in and its details."""

    result: ProcessResult
    cwd: Path
    budget: float
    sandbox: StepSandbox

    @property
    def details(self) -> JsonObject:
        duration = round(self.result.duration, 3)
        return {"duration_sec": duration, "cwd": str(self.cwd), **self.sandbox.details}


def start_command(
    action: CommandStep, context: StepContext, extra_env: Mapping[str, str] | None = None
) -> CommandRun | StepOutcome:
    """Run the action's command in its cwd (contained in the lane or project root); a
    StepOutcome instead when it could not start."""
    try:
        cwd = resolve_inside(context.root, action.cwd, what=f"step {action.id!r} cwd")
    except PolicyViolationError as exc:
        return StepOutcome(StepStatus.FAILED, error=exc.message)
    if not cwd.is_dir():
        return StepOutcome(
            StepStatus.FAILED,
            error=f"step {action.id!r} cwd {action.cwd!r} is not a directory ({cwd})",
        )
    argv = ["/bin/sh", "-c", action.command] if isinstance(action.command, str) else action.command
    budget = min(action.timeout_sec, context.time_left())
    if budget <= 0:
        return StepOutcome(StepStatus.TIMED_OUT, error="the run's max_duration_min was used up")
    env = {**child_env(context, action), **(extra_env or {})}
    try:
        sandbox = step_sandbox(action, context, env)
    except SandboxUnavailable as exc:
        return StepOutcome(StepStatus.FAILED, error=exc.message)
    live = LiveOutput(
        step_output_writer(context.sessions, context.run_id, context.step_index), OUTPUT_CAP
    )
    try:
        result = run_process(
            argv,
            cwd=cwd,
            env=env,
            timeout=budget,
            kill_grace=context.kill_grace,
            should_stop=context.should_stop,
            cap=OUTPUT_CAP,
            masker=context.masker,
            sandbox=sandbox.layout,
            on_output=live.feed,
            on_tick=live.tick,
        )
    except ChildProcessError:  # it started; then its supervisor died under it
        error = SUPERVISOR_KILLED + (SANDBOX_ENDED if sandbox.layout else UNSANDBOXED)
        return StepOutcome(StepStatus.FAILED, result=sandbox.details, error=error)
    except OSError as exc:
        return StepOutcome(StepStatus.FAILED, error=f"could not start {argv[0]!r}: {exc.strerror}")
    finally:
        live.finish()
    return CommandRun(result, cwd, budget, sandbox)


def command_outcome(run: CommandRun, action: CommandStep) -> StepOutcome:
    """How the command's exit decides the step."""
    result = run.result
    if result.timed_out:
        limit = "step timeout" if run.budget == action.timeout_sec else "run's max_duration_min"
        return StepOutcome(
            StepStatus.TIMED_OUT,
            output=result.output,
            result=run.details,
            error=f"killed after {run.budget:g}s ({limit}); "
            "everything the command started was stopped",
        )
    if result.cancelled:
        return StepOutcome(
            StepStatus.FAILED,
            output=result.output,
            result=run.details,
            error="stopped: run cancelled",
        )
    status = StepStatus.SUCCEEDED if result.exit_code == 0 else StepStatus.FAILED
    error = (
        None if status is StepStatus.SUCCEEDED else f"command exited with status {result.exit_code}"
    )
    return StepOutcome(status, result.exit_code, result.output, run.details, error)


def run_command(action: CommandStep, context: StepContext) -> StepOutcome:
    """Run the command; refuse before starting anything if its cwd leaves the project."""
    run = start_command(action, context)
    return run if isinstance(run, StepOutcome) else command_outcome(run, action)
