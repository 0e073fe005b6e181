"""The version history of rules (append-only), seeded with every rule's current version

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

UTC = sa.DateTime(timezone=True)
AUTO_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
JSON_DOCUMENT = sa.JSON().with_variant(JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "rule_versions",
        sa.Column("id", AUTO_ID, primary_key=True, autoincrement=True),
        sa.Column("rule_id", sa.String(64), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("change", sa.String(16), nullable=False),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("source_file", sa.String(1024)),
        sa.Column("content_hash", sa.String(64), nullable=False),
        sa.Column("document", JSON_DOCUMENT, nullable=False),
        sa.Column("changed_by", sa.String(255), nullable=False),
        sa.Column("changed_at", UTC, nullable=False),
        sa.UniqueConstraint("rule_id", "version", name="uq_rule_versions_rule_id_version"),
    )
    # The rules that exist already start their history at their current version.
    op.execute(
        "INSERT INTO rule_versions (rule_id, version, change, source, source_file, "
        "content_hash, document, changed_by, changed_at) "
        "SELECT id, version, 'created', source, source_file, content_hash, document, "
        "'migration 0010', updated_at FROM rules"
    )


def downgrade() -> None:
    op.drop_table("rule_versions")
