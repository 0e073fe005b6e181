"""The table of durable agent threads (`ade_tasks.db.threads`): one row per ended session of a
thread, keyed by the rule's project and the thread's rendered key."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Boolean, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from ade_tasks.db.model_base import AutoId, Base, JsonDocument
from ade_tasks.json_document import JsonObject


class ThreadEntryRow(Base):
    """One ended agent session of thread (`project`, `key`): its run and step, how it ended, and
    its conversation as bounded turns (`ade_tasks.agents.threads`). Rows are only appended (and
    the oldest pruned), so two sessions ending at once both keep theirs. No foreign key to
    `runs`: a thread outlives the history retention of the runs that wrote it."""

    __tablename__ = "agent_thread_entries"
    __table_args__ = (
        Index("ix_agent_thread_entries_project_key_id", "project", "key", "id"),
        Index("ix_agent_thread_entries_run_id", "run_id"),
    )

    id: Mapped[int] = mapped_column(AutoId, primary_key=True, autoincrement=True)
    project: Mapped[str] = mapped_column(String(64))
    key: Mapped[str] = mapped_column(String(200))
    run_id: Mapped[str] = mapped_column(String(36))
    step_id: Mapped[str] = mapped_column(String(64))
    rule_id: Mapped[str] = mapped_column(String(64))
    #: How the session ended (`completed`, `failed`, `timed_out`, `max_turns`, ...).
    status: Mapped[str] = mapped_column(String(32))
    summary: Mapped[str] = mapped_column(Text)
    #: The session's prompt held outsiders' text (or continued a thread that did).
    tainted: Mapped[bool] = mapped_column(Boolean)
    created_at: Mapped[datetime]
    #: [{"role": "user"|"assistant"|"tool", "text": ...}], bounded when written.
    turns: Mapped[list[JsonObject]] = mapped_column(JsonDocument)
    chars: Mapped[int] = mapped_column(Integer)
