"""runs.concurrency_key: the rule's `concurrency.key` rendered from the run's trigger, and a
partial index on (rule_id, concurrency_key, status) over the runs that have one, so "the active
runs of rule R with key K" is an index lookup and rules without a key cost the index nothing

On PostgreSQL `runs` is partitioned (0020): the column is added to the parent (and so to every
partition) without a rewrite, since it has no default; the index is created on the parent,
which builds it on each partition (not CONCURRENTLY, which a partitioned table does not allow;
every existing row has no key, so each partition's build reads it once and writes nothing).

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None

INDEX = "ix_runs_rule_id_concurrency_key_status"
WHERE = sa.text("concurrency_key IS NOT NULL")


def upgrade() -> None:
    op.add_column("runs", sa.Column("concurrency_key", sa.String(255), nullable=True))
    op.create_index(
        INDEX,
        "runs",
        ["rule_id", "concurrency_key", "status"],
        postgresql_where=WHERE,
        sqlite_where=WHERE,
    )


def downgrade() -> None:
    op.drop_index(INDEX, table_name="runs")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("concurrency_key")
