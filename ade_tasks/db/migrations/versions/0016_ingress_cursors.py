"""ingress_cursors: how far each polled or relayed ingress source has been read

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-11
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "ingress_cursors",
        sa.Column("source", sa.String(255), nullable=False),
        sa.Column("value", sa.Text(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_by", sa.String(255), nullable=False),
        sa.PrimaryKeyConstraint("source", name=op.f("pk_ingress_cursors")),
    )


def downgrade() -> None:
    op.drop_table("ingress_cursors")
