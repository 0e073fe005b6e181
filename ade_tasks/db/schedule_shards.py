"""Query functions for the shards of a boundary: claiming one, pruning old claims.

A beat claims a shard (`ade_tasks.schedule.shards`) and that shard's occurrences in one
transaction, so a claimed shard always has its occurrences claimed: a beat that dies after the
commit leaves claims any beat re-fires when stale (`ade_tasks.schedule.scheduler`), and one that
dies before it leaves nothing, and the others' claims of the shard, waiting on its row, win.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import cast

from sqlalchemy import Table, delete
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from ade_tasks.clock import utcnow
from ade_tasks.db.shard_tables import ScheduleShardRow

SHARDS = cast(Table, ScheduleShardRow.__table__)
#: A shard claim matters only while its slot can still fire (late or caught up); a slot older
#: than this claimed again (a long catch-up window) still fires once through its occurrences.
RETENTION = timedelta(days=2)


def claim_shard(
    session: Session, slot: datetime, shards: int, shard: int, digest: int, beat_id: str
) -> bool:
    """Claim one shard of `slot`; True when this beat is to claim the shard's occurrences: it won
    the shard, or the winner claimed other triggers than `digest` says this beat sees.

    One INSERT ... ON CONFLICT DO UPDATE that counts a lost claim (`losers` comes back 0 only to
    the beat that inserted the row). A loser waits on the winner's uncommitted row, so it only
    ever compares digests with a winner whose occurrences are committed."""
    dialect = session.get_bind().dialect.name
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    values = insert(SHARDS).values(
        slot=slot,
        shards=shards,
        shard=shard,
        digest=digest,
        claimed_by=beat_id[:255],
        claimed_at=utcnow(),
        losers=0,
    )
    statement = values.on_conflict_do_update(
        index_elements=[SHARDS.c.slot, SHARDS.c.shards, SHARDS.c.shard],
        set_={"losers": SHARDS.c.losers + 1},
    ).returning(SHARDS.c.losers, SHARDS.c.digest)
    losers, won_digest = session.execute(statement).one()
    return bool(losers == 0 or won_digest != digest)


def prune(session: Session, now: datetime | None = None) -> int:
    """Delete shard claims older than `RETENTION`; returns how many."""
    cutoff = (now or utcnow()) - RETENTION
    result = session.execute(delete(SHARDS).where(SHARDS.c.slot < cutoff))
    return int(getattr(result, "rowcount", 0) or 0)
