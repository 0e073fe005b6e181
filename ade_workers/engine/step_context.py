"""What a run's steps execute in: the `StepContext` the runner builds once per run (the chain
narrows it per step), the lanes a step may name, and the call of a step's executor."""

from __future__ import annotations

import logging
import time

from ade_tasks.db import lanes as lanes_db
from ade_tasks.db.engine import SessionFactory
from ade_tasks.db.lanes import LaneRef
from ade_tasks.guardrails.guardrail import Deadline
from ade_tasks.rules.steps import Action
from ade_tasks.states import StepStatus
from ade_workers.actions.executor import StepContext, StepOutcome
from ade_workers.actions.registry import unknown_action
from ade_workers.engine.chain import ChainState, template_context
from ade_workers.engine.run_monitor import Watch
from ade_workers.engine.run_plan import RunPlan
from ade_workers.engine.runner_config import RunnerConfig

log = logging.getLogger(__name__)


def base_context(
    session_factory: SessionFactory,
    config: RunnerConfig,
    run_id: str,
    plan: RunPlan,
    deadline: Deadline,
    monitor: Watch,
) -> StepContext:
    """The context every step of the run starts from; the chain narrows it per step."""
    return StepContext(
        run_id=run_id,
        rule=plan.rule,
        trigger=plan.trigger,
        step_index=0,
        project_root=plan.project_root,
        env_allowlist=config.settings.command_env_allowlist,
        base_env=config.base_env,
        time_left=lambda: deadline.at - time.monotonic(),
        should_stop=monitor.should_stop,
        should_stop_now=monitor.should_stop_now,
        kill_grace=config.settings.kill_grace_seconds,
        sessions=session_factory,
        settings=config.settings,
        sender=config.sender,
        template=template_context(plan.rule, plan.trigger, ChainState()),
    )


def find_lane(sessions: SessionFactory, project: str, name: str) -> LaneRef | None:
    """The project's active lane of that name (None: there is none)."""
    with sessions.begin() as session:
        row = lanes_db.active_lane(session, project, name)
    return None if row is None else lanes_db.lane_ref(row)


def execute_step(config: RunnerConfig, action: Action, context: StepContext) -> StepOutcome:
    """Run the step with the executor of its type; an executor's crash fails the step."""
    executor = config.executors.get(action.type)
    if executor is None:
        return StepOutcome(StepStatus.FAILED, error=unknown_action(action.type, config.executors))
    try:
        return executor(action, context)
    except Exception as exc:  # an executor bug must end the step, not leave it running
        log.exception("step %s of run %s crashed", context.step_index, context.run_id)
        return StepOutcome(StepStatus.FAILED, error=f"internal error in {action.type}: {exc!r}")
