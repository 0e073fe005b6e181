"""The event-matching index of the rules (`ade_tasks.db.rule_index`): one row per rule, trigger
type and key, so an event reads only the rules whose triggers can match it."""

from __future__ import annotations

from sqlalchemy import ForeignKey, Index, String
from sqlalchemy.orm import Mapped, mapped_column

from ade_tasks.db.model_base import Base


class RuleTriggerKeyRow(Base):
    """Rule `rule_id` has a trigger of `trigger_type` that an event carrying `match_key` may
    start (`*`: any event of the type). Written with the rule's document; deleted with it."""

    __tablename__ = "rule_trigger_keys"
    __table_args__ = (Index("ix_rule_trigger_keys_lookup", "trigger_type", "match_key", "rule_id"),)

    rule_id: Mapped[str] = mapped_column(
        String(64), ForeignKey("rules.id", ondelete="CASCADE"), primary_key=True
    )
    trigger_type: Mapped[str] = mapped_column(String(64), primary_key=True)
    match_key: Mapped[str] = mapped_column(String(255), primary_key=True)
