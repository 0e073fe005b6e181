"""agent_thread_entries: durable agent threads, one row per ended session of a thread keyed by
(project, key) (`ade_tasks.db.threads`)

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-14
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from ade_tasks.db.model_base import UTCDateTime

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None

AUTO_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "agent_thread_entries",
        sa.Column("id", AUTO_ID, autoincrement=True, nullable=False),
        sa.Column("project", sa.String(64), nullable=False),
        sa.Column("key", sa.String(200), nullable=False),
        sa.Column("run_id", sa.String(36), nullable=False),
        sa.Column("step_id", sa.String(64), nullable=False),
        sa.Column("rule_id", sa.String(64), nullable=False),
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.Column("tainted", sa.Boolean(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("turns", JSON, nullable=False),
        sa.Column("chars", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_agent_thread_entries")),
    )
    op.create_index(
        "ix_agent_thread_entries_project_key_id", "agent_thread_entries", ["project", "key", "id"]
    )
    op.create_index("ix_agent_thread_entries_run_id", "agent_thread_entries", ["run_id"])


def downgrade() -> None:
    op.drop_table("agent_thread_entries")
