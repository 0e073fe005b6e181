"""Query functions for a run's steps (`run_steps`): announcing one as running, recording its
outcome, and reading them in order.

A step row is keyed by (run id, index): the outcome is an upsert over the announcement, so it is
recorded whether or not the announcement got there first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import cast

from sqlalchemy import Table, select
from sqlalchemy.orm import Session

from ade_tasks.db.direct import Statements
from ade_tasks.db.prepared import prepared
from ade_tasks.db.schema import MAX_ERROR, RunStepRow
from ade_tasks.json_document import JsonObject
from ade_tasks.states import StepStatus

STEPS = cast(Table, RunStepRow.__table__)
#: The most characters of a step's output stored. run-command keeps the head and tail of 80,000
#: (ade_workers/containment/process.py); this bounds every executor, so a run's detail stays
#: bounded.
MAX_OUTPUT = 100_000

STEP_COLUMNS = (
    "run_id", "index", "step_id", "action_type", "started_at", "status", "finished_at",
    "exit_code", "output", "result", "error",
)  # fmt: skip
_QUOTED_STEP_COLUMNS = ", ".join(f'"{c}"' for c in STEP_COLUMNS)  # "index" is a keyword
#: The step's unique key per dialect: on PostgreSQL `run_steps` is partitioned by `started_at`
#: (migration 0020), so its unique index holds it too.
STEP_KEY = {"postgresql": 'run_id, "index", started_at', "sqlite": 'run_id, "index"'}
#: The `started_at` a step's row is written with: on PostgreSQL the one its row already holds
#: (a later attempt of the step, on another worker, starts later), so every write of a step meets
#: its one row on the partitioned table's key, as (run id, index) alone did.
_STARTED_AT = {
    "postgresql": "coalesce((SELECT s.started_at FROM run_steps AS s WHERE s.run_id = :run_id "
    'AND s."index" = :index), :started_at)',
    "sqlite": ":started_at",
}


def _step_values(dialect: str) -> str:
    return ", ".join(_STARTED_AT[dialect] if c == "started_at" else f":{c}" for c in STEP_COLUMNS)


def step_upsert(dialect: str) -> str:
    """A step's outcome over its announcement, as SQL text: also a CTE of the run's finishing
    statement on PostgreSQL (`ade_tasks.db.runs.finish_run`), which records the last step with
    it."""
    kept = ("run_id", "index", "started_at")
    return (
        f"INSERT INTO run_steps ({_QUOTED_STEP_COLUMNS}) "
        f"VALUES ({_step_values(dialect)}) ON CONFLICT ({STEP_KEY[dialect]}) "
        "DO UPDATE SET " + ", ".join(f"{c} = excluded.{c}" for c in STEP_COLUMNS if c not in kept)
    )


STEP_UPSERT = step_upsert("postgresql")
# A step is shown running only while its run is: a run cancelled (or recovered) between the
# step's start and this announcement must not keep a `running` step forever.
_ANNOUNCE_STEP = {
    dialect: prepared(
        f"INSERT INTO run_steps ({_QUOTED_STEP_COLUMNS}) "
        f"SELECT {_step_values(dialect)} "
        "WHERE EXISTS (SELECT 1 FROM runs WHERE id = :run_id AND status = 'running') "
        f"ON CONFLICT ({key}) DO NOTHING",
        STEPS,
        *STEP_COLUMNS,
    )
    for dialect, key in STEP_KEY.items()
}
_RECORD_STEP = {
    dialect: prepared(step_upsert(dialect), STEPS, *STEP_COLUMNS) for dialect in STEP_KEY
}


@dataclass(frozen=True)
class StepRecord:
    """One step as the runner reports it: started, or finished with its outcome."""

    run_id: str
    index: int
    step_id: str
    action_type: str
    started_at: datetime
    status: StepStatus = StepStatus.RUNNING
    finished_at: datetime | None = None
    exit_code: int | None = None
    output: str = ""
    result: JsonObject = field(default_factory=dict)
    error: str | None = None

    def values(self) -> JsonObject:
        """The step's columns as statement parameters (named as in `STEP_COLUMNS`)."""
        return {
            "run_id": self.run_id,
            "index": self.index,
            "step_id": self.step_id,
            "action_type": self.action_type,
            "started_at": self.started_at,
            "status": self.status,
            "finished_at": self.finished_at,
            "exit_code": self.exit_code,
            "output": capped_output(self.output),
            "result": self.result,
            "error": self.error[:MAX_ERROR] if self.error else self.error,
        }


def capped_output(output: str) -> str:
    """`output`, or its head and tail with a note of what was left out when it is too long."""
    if len(output) <= MAX_OUTPUT:
        return output
    half = MAX_OUTPUT // 2
    left_out = len(output) - 2 * half
    return f"{output[:half]}\n[... {left_out} characters omitted ...]\n{output[-half:]}"


def announce_step(session: Session, step: StepRecord) -> None:
    """Show a step as running; a no-op if its outcome was recorded first (a race we allow) or
    its run is no longer running."""
    session.execute(_ANNOUNCE_STEP[session.get_bind().dialect.name], step.values())


def record_step(session: Statements, step: StepRecord) -> None:
    """Record a step's outcome, whether or not it was announced as running."""
    session.execute(_RECORD_STEP[session.get_bind().dialect.name], step.values())


def list_steps(session: Session, run_id: str) -> Sequence[RunStepRow]:
    """The run's steps in order."""
    return session.scalars(
        select(RunStepRow).where(RunStepRow.run_id == run_id).order_by(RunStepRow.index)
    ).all()
