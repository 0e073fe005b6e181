"""What every action executor shares: the context of the step it runs, the outcome it returns,
and the protocol it implements (`ade_workers.actions.registry` maps action types to them)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, TypeVar

from ade_tasks.db.engine import SessionFactory
from ade_tasks.db.lanes import LaneRef
from ade_tasks.json_document import JsonObject
from ade_tasks.rules.rule import Rule
from ade_tasks.rules.steps import Step
from ade_tasks.runs.senders import RunSender
from ade_tasks.secrets import Masker
from ade_tasks.settings import Settings
from ade_tasks.states import StepStatus
from ade_tasks.templating import TemplateContext


@dataclass(frozen=True, kw_only=True)
class StepContext:
    """What an executor may know about the run it serves.

    The runner builds one per run (`ade_workers.engine.step_context`) and the chain narrows it per
    step, so everything a real run has is required here and no executor checks for it.
    """

    run_id: str
    rule: Rule
    trigger: JsonObject
    step_index: int
    project_root: Path
    env_allowlist: tuple[str, ...]
    base_env: Mapping[str, str]
    time_left: Callable[[], float]
    should_stop: Callable[[], bool]
    #: Transactions for what an executor records (lanes, cleanups, events it dispatches).
    sessions: SessionFactory
    settings: Settings
    #: Dispatches the lane events a step emits to the rules they trigger. None only for a
    #: runner configured without a broker (a test, a tool): its steps emit no lane events.
    sender: RunSender | None
    #: What `{{...}}` may refer to at this step (an agent step renders its prompt with it).
    template: TemplateContext
    kill_grace: float = 3.0
    step_id: str = ""
    #: Where the step runs: its lane's worktree, or the project root.
    cwd_root: Path = Path()
    #: The lane the step targets; None when it runs in the project root (no lane is a state,
    #: not a missing value).
    lane: LaneRef | None = None
    masker: Masker = field(default_factory=Masker.none)
    #: `should_stop`, asking the database now (one query) instead of going by the run
    #: monitor's last look; None: `should_stop` is all there is (a test, a tool).
    should_stop_now: Callable[[], bool] | None = None

    @property
    def root(self) -> Path:
        """The directory relative paths of the step resolve against."""
        return self.cwd_root if self.cwd_root != Path() else self.project_root


@dataclass(frozen=True)
class StepOutcome:
    """How a step ended, as recorded in `run_steps`."""

    status: StepStatus
    exit_code: int | None = None
    output: str = ""
    result: JsonObject = field(default_factory=dict)
    error: str | None = None


#: The step model an executor runs (contravariant: an executor of `Step` runs any step).
StepT_contra = TypeVar("StepT_contra", bound=Step, contravariant=True)


class ActionExecutor(Protocol[StepT_contra]):
    """Runs one action of a built-in rule: `ActionExecutor[CreateLaneAction]` runs
    `create-lane` steps. The registry pairs a step's `type` with its executor."""

    def __call__(self, action: StepT_contra, context: StepContext) -> StepOutcome: ...
