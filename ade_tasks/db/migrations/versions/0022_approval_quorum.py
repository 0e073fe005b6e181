"""approval quorum: a gate's number of approvals, the requester who may not approve, and the
approvals counted so far

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("approvals") as batch:
        batch.add_column(
            sa.Column("approvals_needed", sa.Integer(), nullable=False, server_default="1")
        )
        batch.add_column(sa.Column("excluded_approver", sa.String(255), nullable=True))
        batch.add_column(sa.Column("votes", JSON, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("approvals") as batch:
        batch.drop_column("votes")
        batch.drop_column("excluded_approver")
        batch.drop_column("approvals_needed")
