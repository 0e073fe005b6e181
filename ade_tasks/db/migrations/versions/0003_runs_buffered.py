"""runs.buffered: runs held back by a rule's overlap policy

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("buffered", sa.Boolean(), nullable=False, server_default="0"))
    op.create_index("ix_runs_rule_id_status", "runs", ["rule_id", "status"])


def downgrade() -> None:
    op.drop_index("ix_runs_rule_id_status", "runs")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("buffered")
