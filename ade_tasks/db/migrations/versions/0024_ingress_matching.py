"""ingress_events.matching: what matching made of each candidate rule (its verdicts, bounded),
or that the kill switch holds the event

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-10
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Nullable: events matched before this revision have no verdicts, and say so (None).
    op.add_column(
        "ingress_events",
        sa.Column("matching", sa.JSON().with_variant(JSONB(), "postgresql"), nullable=True),
    )


def downgrade() -> None:
    op.drop_column("ingress_events", "matching")
