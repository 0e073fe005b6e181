"""schedule shards: a beat claims a shard of a boundary's due triggers in one statement, and the
beats that find it taken skip its occurrences (`ade_tasks.db.schedule_shards`)

Revision ID: 0027
Revises: 0025
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from ade_tasks.db.model_base import UTCDateTime

revision = "0027"
down_revision = "0026"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "schedule_shards",
        sa.Column("slot", UTCDateTime(), nullable=False),
        sa.Column("shards", sa.Integer(), nullable=False),
        sa.Column("shard", sa.Integer(), nullable=False),
        sa.Column("digest", sa.BigInteger(), nullable=False),
        sa.Column("claimed_by", sa.String(255), nullable=False),
        sa.Column("claimed_at", UTCDateTime(), nullable=False),
        sa.Column("losers", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("slot", "shards", "shard", name=op.f("pk_schedule_shards")),
    )


def downgrade() -> None:
    op.drop_table("schedule_shards")
