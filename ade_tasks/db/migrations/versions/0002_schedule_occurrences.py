"""schedule_occurrences: cron slots claimed by exactly one beat

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from ade_tasks.db.schema import UTCDateTime

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "schedule_occurrences",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True),
        sa.Column("rule_id", sa.String(64), nullable=False),
        sa.Column("trigger_index", sa.Integer(), nullable=False),
        sa.Column("cron", sa.String(128), nullable=False),
        sa.Column("slot", UTCDateTime(), nullable=False),
        sa.Column("claimed_by", sa.String(255), nullable=False),
        sa.Column("claimed_at", UTCDateTime(), nullable=False),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("run_id", sa.String(36), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("duplicate_claims", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_schedule_occurrences")),
        sa.UniqueConstraint(
            "rule_id", "trigger_index", "cron", "slot", name="uq_schedule_occurrences_key"
        ),
    )
    op.create_index("ix_schedule_occurrences_slot", "schedule_occurrences", ["slot"])


def downgrade() -> None:
    op.drop_table("schedule_occurrences")
