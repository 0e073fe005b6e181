"""ingress events, custom hook delivery logs and rate windows

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(JSONB(), "postgresql")
UTC = sa.DateTime(timezone=True)
AUTO_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "ingress_events",
        sa.Column("id", AUTO_ID, primary_key=True, autoincrement=True),
        sa.Column("source", sa.String(80), nullable=False),
        sa.Column("delivery_id", sa.String(255)),
        sa.Column("event_key", sa.String(128), nullable=False),
        sa.Column("trigger_type", sa.String(64)),
        sa.Column("summary", sa.String(500), nullable=False),
        sa.Column("body_hash", sa.String(64)),
        sa.Column("payload", JSON, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("runs", JSON),
        sa.Column("error", sa.Text()),
        sa.Column("received_at", UTC, nullable=False),
        sa.Column("processed_at", UTC),
        sa.UniqueConstraint("source", "delivery_id", name="uq_ingress_events_source_delivery"),
        sa.UniqueConstraint("source", "body_hash", name="uq_ingress_events_source_body_hash"),
    )
    op.create_index("ix_ingress_events_received_at", "ingress_events", ["received_at"])
    op.create_index(
        "ix_ingress_events_status_received_at", "ingress_events", ["status", "received_at"]
    )
    op.create_table(
        "hook_deliveries",
        sa.Column("id", AUTO_ID, primary_key=True, autoincrement=True),
        sa.Column("hook_id", sa.String(64), nullable=False),
        sa.Column("received_at", UTC, nullable=False),
        sa.Column("status_code", sa.Integer(), nullable=False),
        sa.Column("outcome", sa.Text(), nullable=False),
        sa.Column("delivery_id", sa.String(255)),
        sa.Column("event_id", AUTO_ID),
        sa.Column("headers", JSON, nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
    )
    op.create_index("ix_hook_deliveries_hook_id_id", "hook_deliveries", ["hook_id", "id"])
    op.create_table(
        "hook_rates",
        sa.Column("hook_id", sa.String(64), primary_key=True),
        sa.Column("window", UTC, primary_key=True),
        sa.Column("count", sa.Integer(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("hook_rates")
    op.drop_index("ix_hook_deliveries_hook_id_id", "hook_deliveries")
    op.drop_table("hook_deliveries")
    op.drop_index("ix_ingress_events_status_received_at", "ingress_events")
    op.drop_index("ix_ingress_events_received_at", "ingress_events")
    op.drop_table("ingress_events")
