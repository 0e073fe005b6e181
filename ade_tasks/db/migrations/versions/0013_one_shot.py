"""scheduled_runs: one-shot runs (run_at / delay_seconds triggers, scheduled manual runs),
claimed by exactly one beat when due

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from ade_tasks.db.schema import UTCDateTime

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "scheduled_runs",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("key", sa.String(255), nullable=False),
        sa.Column("rule_id", sa.String(64), nullable=False),
        sa.Column("trigger_index", sa.Integer(), nullable=True),
        sa.Column("spec", sa.String(64), nullable=True),
        sa.Column("run_at", UTCDateTime(), nullable=False),
        sa.Column("catchup_seconds", sa.Integer(), nullable=True),
        sa.Column(
            "inputs", sa.JSON().with_variant(postgresql.JSONB(), "postgresql"), nullable=False
        ),
        sa.Column("requested_by", sa.String(255), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("claimed_by", sa.String(255), nullable=True),
        sa.Column("claimed_at", UTCDateTime(), nullable=True),
        sa.Column("run_id", sa.String(36), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_scheduled_runs")),
        sa.UniqueConstraint("key", name=op.f("uq_scheduled_runs_key")),
    )
    op.create_index("ix_scheduled_runs_status_run_at", "scheduled_runs", ["status", "run_at"])
    op.create_index("ix_scheduled_runs_rule_id_run_at", "scheduled_runs", ["rule_id", "run_at"])


def downgrade() -> None:
    op.drop_table("scheduled_runs")
