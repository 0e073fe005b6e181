"""Whether the webhook benchmark's accepted deliveries reached ADE exactly once: each stored as one
`ingress_events` row (or logged as pruned by its retention) under the event id its answer gave,
and carried by exactly one ingress message waiting in the broker."""

from __future__ import annotations

import base64
import collections
import json
from collections.abc import Sequence
from dataclasses import dataclass

import redis
from sqlalchemy import Engine, text

from bench.webhooks_load import Sample

INGRESS_QUEUE = "ade.ingress"  # where the API queues ingress messages (ade_workers.celery.sender)


@dataclass
class StoredCheck:
    """What became of ADE's accepted deliveries in the database."""

    accepted: int
    in_table: int
    pruned: int
    missing: int
    duplicated: int
    wrong_id: int
    stored_unanswered: int  # stored although the client got no 202 (a timeout, say)
    handed_over: int = 0  # accepted events in exactly one ingress message

    @property
    def ok(self) -> bool:
        handed = self.handed_over == self.accepted
        return handed and not (self.missing or self.duplicated or self.wrong_id)


_STORED = text(
    "SELECT delivery_id, id FROM ingress_events"
    " WHERE source = 'github' AND delivery_id = ANY(CAST(:ids AS text[]))"
    " UNION ALL SELECT delivery_id, id FROM bench_pruned_events"
    " WHERE source = 'github' AND delivery_id = ANY(CAST(:ids AS text[]))"
)
_IN_TABLE = text(
    "SELECT count(*) FROM ingress_events"
    " WHERE source = 'github' AND delivery_id = ANY(CAST(:ids AS text[]))"
)


def check_stored(engine: Engine, samples: Sequence[Sample]) -> StoredCheck:
    """Each accepted delivery stored once, under the event id its answer gave."""
    answered = {s.delivery: s.event_id for s in samples if s.status == 202}
    sent = [s.delivery for s in samples]
    with engine.connect() as connection:
        rows = connection.execute(_STORED, {"ids": sent}).all()
        in_table = connection.execute(_IN_TABLE, {"ids": list(answered)}).scalar_one()
    ids: dict[str, list[int]] = collections.defaultdict(list)
    for delivery, event_id in rows:
        ids[delivery].append(int(event_id))
    return StoredCheck(
        accepted=len(answered),
        in_table=int(in_table),
        pruned=sum(1 for d in answered if ids.get(d)) - int(in_table),
        missing=sum(1 for d in answered if not ids.get(d)),
        duplicated=sum(1 for d in ids if len(ids[d]) > 1),
        wrong_id=sum(1 for d, e in answered.items() if len(ids.get(d, [])) == 1 and ids[d] != [e]),
        stored_unanswered=sum(1 for d in ids if d not in answered),
    )


def queued_events(store: redis.Redis) -> tuple[int, collections.Counter[int]]:
    """The messages waiting in the ingress queue's Redis lists, and the event ids they carry
    (a kombu envelope around Celery's [args, kwargs, embed] body)."""
    messages, carried = 0, collections.Counter[int]()
    for key in store.scan_iter(match=f"{INGRESS_QUEUE}*"):
        if store.type(key) != b"list":
            continue
        for raw in store.lrange(key, 0, -1):
            envelope = json.loads(raw)
            body = envelope["body"]
            if envelope["properties"].get("body_encoding") == "base64":
                body = base64.b64decode(body)
            messages += 1
            carried.update(json.loads(body)[0])
    return messages, carried
