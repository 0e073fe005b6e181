"""The outbox of cluster notifications (`ade_tasks.db.notifications`): one row per event and
route, written by the housekeeping sweep that sees the event and settled by its delivery."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from ade_tasks.db.model_base import AutoId, Base


class NotificationRow(Base):
    """One notification of one event to one route: `pending` until delivered (`sent`) or given
    up after its attempts (`failed`). (`key`, `route`) is unique, so an event seen twice (a
    redelivered finish, two sweeps) notifies once per route."""

    __tablename__ = "notifications"
    __table_args__ = (
        UniqueConstraint("key", "route", name="uq_notifications_key_route"),
        Index("ix_notifications_status_due_at", "status", "due_at"),
        Index("ix_notifications_created_at", "created_at"),
    )

    id: Mapped[int] = mapped_column(AutoId, primary_key=True, autoincrement=True)
    #: `<event>:<subject>` (`run.failed:<run id>`, `approval.waiting:<approval id>`, ...).
    key: Mapped[str] = mapped_column(String(255))
    route: Mapped[str] = mapped_column(String(64))
    event: Mapped[str] = mapped_column(String(32))
    rule_id: Mapped[str | None] = mapped_column(String(64))
    run_id: Mapped[str | None] = mapped_column(String(36))
    title: Mapped[str] = mapped_column(String(255))
    body: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(16))  # pending | sent | failed
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    #: When the next delivery attempt is due.
    due_at: Mapped[datetime]
    #: The process delivering it, until `claimed_until` (a lease: a delivery that hangs past it
    #: is tried again by whoever claims it next).
    claimed_by: Mapped[str | None] = mapped_column(String(255))
    claimed_until: Mapped[datetime | None]
    error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime]
    sent_at: Mapped[datetime | None]
