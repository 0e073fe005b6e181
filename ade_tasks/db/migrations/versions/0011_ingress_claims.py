"""ingress_events.attempts and claimed_at: a worker claims an event before matching it, so an
event whose matching never finishes (its worker dies each time) is failed after a bound instead
of being re-sent forever

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("ingress_events") as batch:
        batch.add_column(sa.Column("attempts", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("claimed_at", sa.DateTime(timezone=True)))


def downgrade() -> None:
    with op.batch_alter_table("ingress_events") as batch:
        batch.drop_column("claimed_at")
        batch.drop_column("attempts")
