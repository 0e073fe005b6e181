"""rules.file_digest: what a rule's file held when the rule was last synced from it, so a sync
skips re-parsing the files whose bytes did not change

Revision ID: 0019
Revises: 0017
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Nullable and empty at first: the next sync parses every file once and fills it in.
    op.add_column("rules", sa.Column("file_digest", sa.String(64), nullable=True))


def downgrade() -> None:
    op.drop_column("rules", "file_digest")
