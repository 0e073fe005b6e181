"""lanes, scheduled cleanups, approvals, usage per billing code and day, run findings

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(JSONB(), "postgresql")
UTC = sa.DateTime(timezone=True)
AUTO_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("findings", JSON, nullable=True))
    op.create_table(
        "lanes",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("project", sa.String(64), nullable=False),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("branch", sa.String(255), nullable=False),
        sa.Column("path", sa.String(1024), nullable=False),
        sa.Column("base_ref", sa.String(255), nullable=False),
        sa.Column("base_sha", sa.String(64), nullable=False),
        sa.Column("run_id", sa.String(36)),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("created_at", UTC, nullable=False),
        sa.Column("deleted_at", UTC),
    )
    op.create_index("ix_lanes_project_name", "lanes", ["project", "name"])
    op.create_table(
        "scheduled_cleanups",
        sa.Column("id", AUTO_ID, primary_key=True, autoincrement=True),
        sa.Column("run_id", sa.String(36), nullable=False),
        sa.Column("step_id", sa.String(64), nullable=False),
        sa.Column("lane_id", sa.String(36), nullable=False),
        sa.Column("force", sa.Boolean(), nullable=False),
        sa.Column("delete_remote", sa.String(255)),
        sa.Column("due_at", UTC, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("claimed_by", sa.String(255)),
        sa.Column("claimed_at", UTC),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("result", JSON),
        sa.Column("error", sa.Text()),
        sa.Column("created_at", UTC, nullable=False),
        sa.Column("finished_at", UTC),
    )
    op.create_index(
        "ix_scheduled_cleanups_status_due_at", "scheduled_cleanups", ["status", "due_at"]
    )
    op.create_table(
        "approvals",
        sa.Column("id", AUTO_ID, primary_key=True, autoincrement=True),
        sa.Column(
            "run_id",
            sa.String(36),
            sa.ForeignKey("runs.id", ondelete="CASCADE", name="fk_approvals_run_id_runs"),
            nullable=False,
        ),
        sa.Column("step_index", sa.Integer(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("requested_at", UTC, nullable=False),
        sa.Column("decided_at", UTC),
        sa.Column("decided_by", sa.String(255)),
        sa.Column("note", sa.Text()),
        sa.UniqueConstraint("run_id", "step_index", name="uq_approvals_run_id_step_index"),
    )
    op.create_index("ix_approvals_status", "approvals", ["status"])
    op.create_table(
        "usage",
        sa.Column("billing_code", sa.String(128), primary_key=True),
        sa.Column("day", sa.String(10), primary_key=True),
        sa.Column("run_seconds", sa.Float(), nullable=False),
        sa.Column("tokens", sa.BigInteger(), nullable=False),
        sa.Column("cost_usd", sa.Float(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("usage")
    op.drop_index("ix_approvals_status", "approvals")
    op.drop_table("approvals")
    op.drop_index("ix_scheduled_cleanups_status_due_at", "scheduled_cleanups")
    op.drop_table("scheduled_cleanups")
    op.drop_index("ix_lanes_project_name", "lanes")
    op.drop_table("lanes")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("findings")
