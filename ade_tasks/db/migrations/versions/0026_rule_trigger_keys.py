"""rule_trigger_keys: the event-matching index of the rules (`ade_tasks.db.rule_index`), one row
per rule, trigger type and key, filled from the stored documents

Revision ID: 0026
Revises: 0025
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from ade_tasks.db.rule_index import trigger_keys

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None

BATCH = 1000


def upgrade() -> None:
    keys = op.create_table(
        "rule_trigger_keys",
        sa.Column("rule_id", sa.String(64), nullable=False),
        sa.Column("trigger_type", sa.String(64), nullable=False),
        sa.Column("match_key", sa.String(255), nullable=False),
        sa.ForeignKeyConstraint(
            ["rule_id"],
            ["rules.id"],
            name=op.f("fk_rule_trigger_keys_rule_id_rules"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint(
            "rule_id", "trigger_type", "match_key", name=op.f("pk_rule_trigger_keys")
        ),
    )
    op.create_index(
        "ix_rule_trigger_keys_lookup", "rule_trigger_keys", ["trigger_type", "match_key", "rule_id"]
    )
    # The keys of the rules stored so far, from their documents as the code that writes them
    # reads them (a rule written from now on gets its keys in the same transaction).
    rules = sa.table("rules", sa.column("id", sa.String), sa.column("document", sa.JSON))
    bind = op.get_bind()
    ids = sorted(bind.execute(sa.select(rules.c.id)).scalars())
    for start in range(0, len(ids), BATCH):  # a batch of documents in memory at a time
        batch = ids[start : start + BATCH]
        documents = bind.execute(
            sa.select(rules.c.id, rules.c.document).where(rules.c.id.in_(batch))
        ).all()
        rows = [
            {"rule_id": rule_id, "trigger_type": kind, "match_key": key}
            for rule_id, document in documents
            for kind, key in sorted(trigger_keys(document if isinstance(document, dict) else {}))
        ]
        if rows:
            bind.execute(keys.insert(), rows)


def downgrade() -> None:
    op.drop_table("rule_trigger_keys")
