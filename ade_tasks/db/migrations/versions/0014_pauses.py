"""rule_pauses: a rule, or one trigger of it, paused with a note and who paused it;
scheduled_cleanups.delete_branch: a deferred lane deletion may keep the branch

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

UTC = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "rule_pauses",
        sa.Column("rule_id", sa.String(64), nullable=False),
        sa.Column("trigger_index", sa.Integer(), nullable=False),
        sa.Column("note", sa.String(1000), nullable=False),
        sa.Column("paused_by", sa.String(255), nullable=False),
        sa.Column("paused_at", UTC, nullable=False),
        sa.PrimaryKeyConstraint("rule_id", "trigger_index", name="pk_rule_pauses"),
    )
    with op.batch_alter_table("scheduled_cleanups") as batch:
        batch.add_column(
            sa.Column("delete_branch", sa.Boolean(), nullable=False, server_default="1")
        )


def downgrade() -> None:
    with op.batch_alter_table("scheduled_cleanups") as batch:
        batch.drop_column("delete_branch")
    op.drop_table("rule_pauses")
