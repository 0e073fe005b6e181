"""history indexes: every filter of the run history is a range scan of an index ending in
`queued_at` (trigger type; review-queue status, only the runs in the queue; rule and status
together, replacing the rule and status index the overlap checks used, which it still serves)

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

#: name -> (columns, partial-index condition)
INDEXES: dict[str, tuple[list[str], str | None]] = {
    "ix_runs_trigger_type_queued_at": (["trigger_type", "queued_at"], None),
    "ix_runs_queue_status_queued_at": (["queue_status", "queued_at"], "queue_status IS NOT NULL"),
    "ix_runs_rule_id_status_queued_at": (["rule_id", "status", "queued_at"], None),
}
REPLACED = ("ix_runs_rule_id_status", ["rule_id", "status"])


def upgrade() -> None:
    postgresql = op.get_bind().dialect.name == "postgresql"
    for name, (columns, where) in INDEXES.items():
        condition = sa.text(where) if where else None
        if postgresql:
            # Concurrently: a long history's runs table keeps taking writes while each builds.
            with op.get_context().autocommit_block():
                op.create_index(name, "runs", columns, postgresql_concurrently=True,
                                postgresql_where=condition)  # fmt: skip
        else:
            op.create_index(name, "runs", columns, sqlite_where=condition)
    if postgresql:
        with op.get_context().autocommit_block():
            op.drop_index(REPLACED[0], table_name="runs", postgresql_concurrently=True)
    else:
        op.drop_index(REPLACED[0], table_name="runs")


def downgrade() -> None:
    op.create_index(REPLACED[0], "runs", REPLACED[1])
    for name in INDEXES:
        op.drop_index(name, table_name="runs")
