"""notifications: the outbox of cluster notifications, one row per (event key, route)
(`ade_tasks.db.notifications`), and an index of the schedule slots recorded missed

Revision ID: 0025
Revises: 0024
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from ade_tasks.db.model_base import UTCDateTime

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None

AUTO_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "notifications",
        sa.Column("id", AUTO_ID, autoincrement=True, nullable=False),
        sa.Column("key", sa.String(255), nullable=False),
        sa.Column("route", sa.String(64), nullable=False),
        sa.Column("event", sa.String(32), nullable=False),
        sa.Column("rule_id", sa.String(64), nullable=True),
        sa.Column("run_id", sa.String(36), nullable=True),
        sa.Column("title", sa.String(255), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("due_at", UTCDateTime(), nullable=False),
        sa.Column("claimed_by", sa.String(255), nullable=True),
        sa.Column("claimed_until", UTCDateTime(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("sent_at", UTCDateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_notifications")),
        sa.UniqueConstraint("key", "route", name="uq_notifications_key_route"),
    )
    op.create_index("ix_notifications_status_due_at", "notifications", ["status", "due_at"])
    op.create_index("ix_notifications_created_at", "notifications", ["created_at"])
    missed = sa.text("outcome = 'missed'")
    op.create_index(
        "ix_schedule_occurrences_missed_claimed_at",
        "schedule_occurrences",
        ["claimed_at"],
        postgresql_where=missed,
        sqlite_where=missed,
    )


def downgrade() -> None:
    op.drop_index("ix_schedule_occurrences_missed_claimed_at", "schedule_occurrences")
    op.drop_table("notifications")
