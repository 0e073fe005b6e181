"""A boundary split into shards, so that of the beats ticking together only one does each
shard's per-slot work and the others skip it after one statement.

The due occurrences of one minute slot go to `shards` shards by a stable hash of their rule id,
`shards` a power of two that keeps a shard near `occurrences.CLAIM_BATCH` occurrences. Every beat
computes the same split from the same triggers, claims the shards one by one
(`ade_tasks.db.schedule_shards`) and claims and fires the occurrences only of the shards it wins.
Its `digest` names the triggers in the shard, so a beat whose view differs from the winner's (a
rule added or edited since the other's last refresh) claims its own occurrences after all: the
occurrences' unique claim, not the shard, is what keeps every slot exactly once.
"""

from __future__ import annotations

import hashlib
import zlib
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from ade_tasks.db.occurrences import CLAIM_BATCH, OccurrenceKey


@dataclass(frozen=True)
class Shard:
    """One shard of one slot: its place in the split and its occurrences, sorted."""

    slot: datetime
    shards: int
    shard: int
    keys: list[OccurrenceKey]

    @property
    def digest(self) -> int:
        """A signed 64-bit hash of the shard's triggers, the same in every process."""
        text = "\n".join(f"{k.rule_id}\t{k.trigger_index}\t{k.cron}" for k in self.keys)
        raw = hashlib.blake2b(text.encode(), digest_size=8).digest()
        return int.from_bytes(raw, "big", signed=True)


def split(keys: Sequence[OccurrenceKey], batch: int = CLAIM_BATCH) -> list[Shard]:
    """The shards of these occurrences, oldest slot first (a trigger's catch-up fires in
    order), each shard's keys sorted (claims lock rows in one order: no deadlocks)."""
    by_slot: dict[datetime, list[OccurrenceKey]] = defaultdict(list)
    for key in set(keys):
        by_slot[key.slot].append(key)
    result = []
    for slot in sorted(by_slot):
        due = by_slot[slot]
        shards = 1
        while shards * batch < len(due):
            shards *= 2
        groups: list[list[OccurrenceKey]] = [[] for _ in range(shards)]
        for key in due:
            # & (shards - 1) is % shards for a power of two; crc32 is stable across processes.
            groups[zlib.crc32(key.rule_id.encode()) & (shards - 1)].append(key)
        result += [Shard(slot, shards, n, sorted(g)) for n, g in enumerate(groups) if g]
    return result
