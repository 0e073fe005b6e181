"""The claims of a boundary's shards (`ade_tasks.db.schedule_shards`): one row per minute slot
and shard of the triggers due in it, won by the one beat that claims and fires its occurrences."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from ade_tasks.db.model_base import Base


class ScheduleShardRow(Base):
    """One shard of one slot's due triggers (`ade_tasks.schedule.shards`), claimed by one beat.

    `digest` says which triggers the winner claimed, so a beat that lost but sees other triggers
    in the shard (a rule added or edited seconds ago) claims its own occurrences after all;
    `losers` counts the beats that found the shard taken."""

    __tablename__ = "schedule_shards"

    slot: Mapped[datetime] = mapped_column(primary_key=True)
    shards: Mapped[int] = mapped_column(Integer, primary_key=True)  # the slot split in this many
    shard: Mapped[int] = mapped_column(Integer, primary_key=True)
    digest: Mapped[int] = mapped_column(BigInteger)
    claimed_by: Mapped[str] = mapped_column(String(255))
    claimed_at: Mapped[datetime]
    losers: Mapped[int] = mapped_column(Integer, default=0)
