"""A step's stored output is bounded whatever its executor printed: the head and the tail are
kept with a note of what was left out, so a run's detail stays bounded too."""

from __future__ import annotations

import uuid
from pathlib import Path

from ade_tasks.clock import utcnow
from ade_tasks.db import run_steps
from ade_tasks.db.schema import RunRow
from ade_tasks.states import StepStatus
from tests.git_project import migrated_sqlite


def test_a_long_output_is_stored_as_its_head_and_tail(tmp_path: Path) -> None:
    # Given a run
    sessions = migrated_sqlite(tmp_path)
    run_id = str(uuid.uuid4())
    with sessions.begin() as session:
        session.add(RunRow(id=run_id, rule_id="r", rule_version=1, trigger_type="manual",
                           trigger={}, idempotency_key=run_id, status="running",
                           billing_code="auto:r", usage={}, queue="ade.builtin",
                           queued_at=utcnow()))  # fmt: skip
    # When a step records an output three times the cap
    output = "head\n" + "x" * (3 * run_steps.MAX_OUTPUT) + "\ntail"
    step = run_steps.StepRecord(run_id, 0, "s", "run-command", utcnow(), StepStatus.SUCCEEDED,
                                utcnow(), 0, output)  # fmt: skip
    with sessions.begin() as session:
        run_steps.record_step(session, step)
    # Then what is stored is bounded, starts and ends as the output did and says what it left out
    with sessions() as session:
        (stored,) = run_steps.list_steps(session, run_id)
    assert len(stored.output) < run_steps.MAX_OUTPUT + 100
    assert stored.output.startswith("head\n") and stored.output.endswith("\ntail")
    assert f"[... {len(output) - run_steps.MAX_OUTPUT} characters omitted ...]" in stored.output
