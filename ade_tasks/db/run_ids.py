"""Run ids that say which month's partition holds the run.

On PostgreSQL `runs` is partitioned by month of `queued_at`, and its primary key is (id,
queued_at): a statement that finds a run by id alone probes the primary key of every partition,
and its cost grows with the months kept (a claim: 0.21-0.28 ms of server CPU with 5 partitions,
0.32-0.43 ms with 30, docs/performance.md). The broker carries only the run's id, so the id itself
carries the month, and the run path aims its statements at that month's partition
(`ade_tasks.db.runs`).

The id is a UUID of version 8 (RFC 9562, a layout of the application's own) that reads like the
random ids before it: `rrrrrrrr-rrrr-8mmm-vrrr-rrrrrrrrrrrr`, with `mmm` the months from January
1970 to the run's `queued_at` (UTC) in hex, `v` the variant and 110 random bits `r`. The random
bits come first because operators name runs by the first eight characters (`ade-tasks runs`,
the web page): a timestamp there (a UUIDv7) would give every run of the same minute the same
short id.

An id that does not have this form (runs from before it, ids made by hand) names no month, and
its run is found in the parent table, as before.
"""

from __future__ import annotations

import os
import uuid
from datetime import UTC, datetime

_VERSION = 8
_MONTH_BITS = 12  # 4,096 months from 1970: until the year 2311


def new_run_id(queued_at: datetime) -> str:
    """A new run id naming the UTC month of `queued_at` (timezone-aware)."""
    moment = queued_at.astimezone(UTC)
    months = (moment.year - 1970) * 12 + moment.month - 1
    if not 0 <= months < 1 << _MONTH_BITS:
        raise ValueError(f"a run queued at {queued_at.isoformat()} is out of the ids' range")
    random = int.from_bytes(os.urandom(14)) & ((1 << 110) - 1)  # 48 + 62 bits
    value = (
        (random >> 62) << 80  # 48 random bits first: the short id
        | _VERSION << 76
        | months << 64
        | 0b10 << 62  # the RFC 9562 variant
        | random & ((1 << 62) - 1)
    )
    return str(uuid.UUID(int=value))


def queued_month(run_id: str) -> datetime | None:
    """The first instant (UTC) of the month the run was queued in, read from its id; None when
    the id is not of the form `new_run_id` makes (then it says nothing about the run's month)."""
    if len(run_id) != 36 or run_id[14] != "8" or run_id[19] not in "89ab":
        return None
    try:
        months = int(run_id[15:18], 16)
    except ValueError:
        return None
    return datetime(1970 + months // 12, months % 12 + 1, 1, tzinfo=UTC)
