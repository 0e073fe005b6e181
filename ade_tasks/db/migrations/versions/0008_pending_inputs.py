"""pending inputs: the answer given, the tool asked about, and an optional deadline

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("approvals") as batch:
        batch.add_column(sa.Column("answer", sa.String(32), nullable=True))
        batch.add_column(sa.Column("tool", sa.String(128), nullable=True))
        batch.add_column(sa.Column("arguments", JSON, nullable=True))
        batch.add_column(sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True))
    op.create_index(
        "ix_approvals_expires_at",
        "approvals",
        ["expires_at"],
        postgresql_where=sa.text("status = 'pending' AND expires_at IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_approvals_expires_at", table_name="approvals")
    with op.batch_alter_table("approvals") as batch:
        batch.drop_column("expires_at")
        batch.drop_column("arguments")
        batch.drop_column("tool")
        batch.drop_column("answer")
