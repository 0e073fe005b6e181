"""The tables `/metrics` reads instead of the runs table: per-rule rollups of finished runs and
the watermark they were rolled up to (`ade_tasks.db.run_rollups`)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import JSON, BigInteger, Float, String
from sqlalchemy.orm import Mapped, mapped_column

from ade_tasks.db.model_base import Base


class RunRollupRow(Base):
    """The finished runs of one (rule, status) up to the rollup watermark, and how long they ran.
    `/metrics` adds the runs finished since: a scrape reads rows per rule (`db.run_rollups`)."""

    __tablename__ = "run_rollups"

    rule_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    status: Mapped[str] = mapped_column(String(16), primary_key=True)
    runs: Mapped[int] = mapped_column(BigInteger)
    #: Of those, the runs that started (only they have a duration).
    timed: Mapped[int] = mapped_column(BigInteger)
    seconds: Mapped[float] = mapped_column(Float)
    #: Cumulative counts of timed runs per bound of `RUN_DURATION_BUCKETS`.
    buckets: Mapped[list[int]] = mapped_column(JSON)


class RollupWatermarkRow(Base):
    """How far a rollup has read: every run with `finished_at` before `rolled_up_to` is counted
    in `run_rollups`. NULL: nothing rolled up yet (a scrape aggregates the whole table)."""

    __tablename__ = "rollup_watermarks"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    rolled_up_to: Mapped[datetime | None]
    updated_at: Mapped[datetime]
