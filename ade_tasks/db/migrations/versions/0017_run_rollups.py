"""run_rollups: per (rule, status) counts and duration histograms of finished runs, up to a
watermark, so /metrics reads rows per rule instead of the whole runs table

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-12
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "run_rollups",
        sa.Column("rule_id", sa.String(64), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("runs", sa.BigInteger(), nullable=False),
        sa.Column("timed", sa.BigInteger(), nullable=False),
        sa.Column("seconds", sa.Float(), nullable=False),
        sa.Column("buckets", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("rule_id", "status", name=op.f("pk_run_rollups")),
    )
    op.create_table(
        "rollup_watermarks",
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("rolled_up_to", sa.DateTime(timezone=True), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_rollup_watermarks")),
    )
    # NULL: nothing is rolled up yet; the first housekeeping pass reads the history once.
    op.execute(
        "INSERT INTO rollup_watermarks (name, rolled_up_to, updated_at) "
        "VALUES ('runs', NULL, CURRENT_TIMESTAMP)"
    )
    if op.get_bind().dialect.name == "postgresql":
        # Concurrently: a long history's runs table keeps taking writes while the index builds.
        with op.get_context().autocommit_block():
            op.create_index(
                "ix_runs_finished_at", "runs", ["finished_at"], postgresql_concurrently=True
            )
    else:
        op.create_index("ix_runs_finished_at", "runs", ["finished_at"])


def downgrade() -> None:
    op.drop_index("ix_runs_finished_at", table_name="runs")
    op.drop_table("rollup_watermarks")
    op.drop_table("run_rollups")
