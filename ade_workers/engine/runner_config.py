"""What a worker's runner is configured with (settings, the action executors, the worker's
environment, its run monitor and sender), and the notices of runs starting and ending that it
gives a console (`ade-tasks dev` prints them)."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ade_tasks.runs.senders import RunSender
from ade_tasks.settings import Settings
from ade_workers.actions.executor import ActionExecutor
from ade_workers.actions.registry import registry
from ade_workers.engine.run_monitor import RunMonitor

log = logging.getLogger(__name__)

#: A `RunNotice.status` besides the run statuses: the run started on this worker.
STARTED = "started"
#: ... or this worker stopped it without an outcome (lease lost, database away): the recovery
#: sweep decides what comes of it.
INTERRUPTED = "interrupted"


@dataclass(frozen=True)
class RunNotice:
    """A run starting or ending on this worker, for a console that shows runs as they go."""

    run_id: str
    rule_id: str
    status: str  # STARTED, a final or `waiting` RunStatus, or INTERRUPTED
    seconds: float  # since this worker took the run


@dataclass(frozen=True)
class RunnerConfig:
    """What the runner needs: settings, action executors, the worker's environment, a monitor,
    and who hears of runs starting and ending (`ade-tasks dev` prints them)."""

    settings: Settings
    executors: Mapping[str, ActionExecutor[Any]]
    base_env: Mapping[str, str]
    monitor: RunMonitor = field(default_factory=RunMonitor)
    sender: RunSender | None = None  # releases runs buffered by an overlap policy
    on_run: Callable[[RunNotice], None] | None = None

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        sender: RunSender | None = None,
        on_run: Callable[[RunNotice], None] | None = None,
    ) -> RunnerConfig:
        return cls(settings, registry(), dict(os.environ), sender=sender, on_run=on_run)

    def notify(self, run_id: str, rule_id: str, status: str, started: float) -> None:
        """Tell `on_run`; a failing listener never touches the run."""
        if self.on_run is None:
            return
        try:
            self.on_run(RunNotice(run_id, rule_id, status, time.monotonic() - started))
        except Exception:
            log.exception("run %s: the run listener failed", run_id)
