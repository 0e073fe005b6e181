"""The row dispatch returns for a run it inserted, built without the ORM's attribute events."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime

from sqlalchemy import inspect

from ade_tasks.db.runs import inserted_row
from ade_tasks.db.schema import RunRow

VALUES = {"id": "run-1", "rule_id": "r", "status": "queued", "queued_at": datetime.now(UTC),
          "trigger": {"slot": "2026-12-03T16:10Z"}}  # fmt: skip


def test_it_reads_as_the_orm_built_row_and_stays_transient() -> None:
    fast, slow = inserted_row(VALUES), RunRow(**VALUES)
    for column in RunRow.__table__.columns.keys():
        assert getattr(fast, column) == getattr(slow, column), column
    assert inspect(fast).transient


def test_it_works_in_a_process_whose_mappers_were_never_configured() -> None:
    script = (
        "from ade_tasks.db.runs import inserted_row\n"
        "row = inserted_row({'id': 'x', 'status': 'queued'})\n"
        "print(row.id, row.status, row.worker)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["x", "queued", "None"]
