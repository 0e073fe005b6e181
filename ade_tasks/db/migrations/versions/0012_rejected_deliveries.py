"""hook_deliveries.rejected: deliveries that failed authentication are logged on a ring of their
own, so forgeries never push an authentic delivery out of a hook's log

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("hook_deliveries") as batch:
        batch.add_column(sa.Column("rejected", sa.Boolean(), nullable=False, server_default="0"))
    # Entries logged before had every outcome on one ring; those that were refused before the
    # signature was known to be good move to the rejected ring.
    op.execute("UPDATE hook_deliveries SET rejected = (status_code IN (401, 408, 413))")
    op.drop_index("ix_hook_deliveries_hook_id_id", "hook_deliveries")
    op.create_index(
        "ix_hook_deliveries_hook_id_rejected_id", "hook_deliveries", ["hook_id", "rejected", "id"]
    )


def downgrade() -> None:
    op.drop_index("ix_hook_deliveries_hook_id_rejected_id", "hook_deliveries")
    op.create_index("ix_hook_deliveries_hook_id_id", "hook_deliveries", ["hook_id", "id"])
    with op.batch_alter_table("hook_deliveries") as batch:
        batch.drop_column("rejected")
