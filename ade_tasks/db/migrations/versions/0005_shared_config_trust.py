"""shared-config trust: the file hash of shared rules, and the hashes admins trusted

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("rules") as batch:
        batch.add_column(sa.Column("source_hash", sa.String(64), nullable=True))
    op.create_table(
        "trusted_hashes",
        sa.Column("content_hash", sa.String(64), primary_key=True),
        sa.Column("trusted_by", sa.String(255), nullable=False),
        sa.Column("trusted_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("source_file", sa.String(1024)),
    )


def downgrade() -> None:
    op.drop_table("trusted_hashes")
    with op.batch_alter_table("rules") as batch:
        batch.drop_column("source_hash")
