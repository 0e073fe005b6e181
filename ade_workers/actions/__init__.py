"""Action executors: one module per action type behind one protocol, and the registry of them."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ade_tasks.db.schema import StepStatus
from ade_tasks.rules.models import Rule


@dataclass(frozen=True)
class StepContext:
    """What an executor may know about the run it serves."""

    run_id: str
    rule: Rule
    trigger: Mapping[str, Any]
    step_index: int
    project_root: Path
    env_allowlist: tuple[str, ...]
    base_env: Mapping[str, str]
    time_left: Callable[[], float]
    should_stop: Callable[[], bool]
    kill_grace: float = 3.0


@dataclass(frozen=True)
class StepOutcome:
    """How a step ended, as recorded in `run_steps`."""

    status: StepStatus
    exit_code: int | None = None
    output: str = ""
    result: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


class ActionExecutor(Protocol):
    """Runs one action of a built-in rule."""

    def __call__(self, action: Any, context: StepContext) -> StepOutcome: ...


def registry() -> dict[str, ActionExecutor]:
    """Action type -> executor (imported here so each executor stays in its own module)."""
    from ade_workers.actions.run_command import run_command

    return {"run-command": run_command}
