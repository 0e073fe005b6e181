"""Concurrency keys in dispatch: a rule's `concurrency: {key, on_new}` (`rules.concurrency`)
applied to each new run, per rule and key, on the overlap machinery (`db.overlap`).

At dispatch the key is rendered from the trigger and stored on the run (`runs.concurrency_key`);
a trigger whose key cannot render (a field missing or empty) is refused, with no run. Under the
key's lock (`overlap.key_lock`, an advisory lock on PostgreSQL) the rule's runs with the same
key that are queued, running or waiting decide what the new run does:

- `queue`: it waits in the rule's buffer (`queued`, `buffered`, never sent) and starts when the
  key is free: the worker that ends the key's run releases it (as it releases overlap buffers),
  an operator's cancel does too, and the recovery sweep releases any left behind. Runs of one
  key start oldest first, one at a time.
- `skip`: it is recorded `skipped`, its error naming the run that holds the key.
- `supersede`: the key's runs are cancelled with the error "superseded by run X" (a running
  one's worker stops its step within half a second; finished steps, the transcript, agent turns
  and the lane stay) and the new run starts at once.

Runs with other keys are never affected. A rule with a key has no rule-wide overlap policy
(`guardrails.overlap` is refused beside it); `guardrails.max_concurrent` still caps the rule's
runs as a whole, the excess waiting in the buffer as under `allow-all`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime

from sqlalchemy.orm import Session

from ade_tasks.db import overlap as overlap_db
from ade_tasks.db import run_cancels as run_cancels_db
from ade_tasks.db.engine import SessionFactory
from ade_tasks.db.schema import RunRow
from ade_tasks.errors import BrokerUnavailableError
from ade_tasks.json_document import JsonObject
from ade_tasks.rules.concurrency import OnNew, render_key
from ade_tasks.rules.rule import Rule
from ade_tasks.runs.senders import RunSender
from ade_tasks.states import RunStatus
from ade_tasks.templating import RULE_FIELDS

log = logging.getLogger(__name__)

#: The runs of one batch that hold or wait for a key, by (rule id, key): their insert values.
Held = dict[tuple[str, str], list[JsonObject]]


def run_key(rule: Rule, trigger: JsonObject, now: datetime) -> str | None:
    """The new run's key (None: the rule has none); AdmissionError when it cannot render."""
    if rule.concurrency is None:
        return None
    fields = {name: getattr(rule, name) for name in RULE_FIELDS}
    return render_key(rule.concurrency, fields, trigger, now)


def lock_names(rule_id: str, values: JsonObject, rule_lock: bool) -> list[str]:
    """What dispatch locks for this run: the rule (its overlap slots or a guardrail that counts
    its runs) and its key."""
    key = values.get("concurrency_key")
    return ([rule_id] if rule_lock else []) + (
        [] if key is None else [overlap_db.key_lock(rule_id, key)]
    )


def skip(values: JsonObject, reason: str) -> None:
    """Record the new run as `skipped` with the reason (never sent)."""
    values.update(status=RunStatus.SKIPPED, error=reason, finished_at=values["queued_at"])
    values.update(send_count=0, sent_at=None)


def admit(
    session: Session, rule: Rule, values: JsonObject, held: Held, active: dict[str, int]
) -> bool:
    """Apply the rule's `on_new` to the new run under its key's lock; True when it may start
    (then the rule's own limit has its say). `held` tracks the batch's own runs of each key,
    `active` the rule's taken slots (freed by a supersede)."""
    key = values.get("concurrency_key")
    if key is None or rule.concurrency is None:
        return True
    mine = [v for v in held.get((rule.id, key), []) if v["status"] is RunStatus.QUEUED]
    others = overlap_db.active_of_key(session, rule.id, key)
    held.setdefault((rule.id, key), [])
    if not mine and not others:
        held[rule.id, key].append(values)
        return True
    on_new = rule.concurrency.on_new
    if on_new is OnNew.SKIP:
        holder, status = _holder(others, mine)
        skip(
            values, f"skipped by concurrency.on_new skip: run {holder} with key {key!r} is {status}"
        )
        return False
    if on_new is OnNew.QUEUE:
        values.update(buffered=True, send_count=0, sent_at=None)
        held[rule.id, key].append(values)
        return False
    new = values["id"]
    cancelled = set(run_cancels_db.supersede(session, rule.id, key, [r for r, _, _ in others], new))
    freed = sum(1 for run_id, _, buffered in others if run_id in cancelled and not buffered)
    for earlier in mine:  # the batch's own, never inserted: recorded skipped instead
        freed += not earlier["buffered"]
        skip(earlier, f"superseded by run {new} before it started")
    active[rule.id] = max(0, active.get(rule.id, 0) - freed)
    log.info("concurrency key %r of rule %s: run %s supersedes %s", key, rule.id, new, cancelled)
    held[rule.id, key] = [values]
    return True


def _holder(others: list[tuple[str, str, bool]], mine: list[JsonObject]) -> tuple[str, str]:
    """The run that holds the key (not one waiting for it) and its status, for a skip's reason."""
    for run_id, status, buffered in others:
        if not buffered:
            return run_id, status
    if others:
        return others[0][0], "queued behind another"
    return str(mine[0]["id"]), "queued"


def release(
    session_factory: SessionFactory, sender: RunSender, rule: Rule, run_id: str | None = None
) -> list[str]:
    """Start the rule's buffered runs whose key is free now (after run `run_id` ended or was
    cancelled, or, without one, in the recovery sweep); returns their ids."""
    limit = rule.guardrails.max_concurrent
    with session_factory.begin() as session:
        keys = set(overlap_db.buffered_keys(session, rule.id))
        own = session.get(RunRow, run_id) if run_id else None
        if own is not None and own.concurrency_key is not None:
            # Its own key even when nothing was buffered when read: a dispatch holding the key's
            # lock may be buffering one now, and taking the lock waits for it.
            keys.add(own.concurrency_key)
        if not keys:
            return []
        names = [overlap_db.key_lock(rule.id, key) for key in keys]
        overlap_db.lock_rules(session, sorted(names + ([rule.id] if limit else [])))
        released = overlap_db.release_keyed(session, rule.id, sorted(keys), limit)
    send_released(sender, released)
    return [run.id for run in released]


def send_released(sender: RunSender, runs: Sequence[RunRow]) -> None:
    """Send runs just taken out of a buffer; one the broker refuses stays queued and
    unbuffered, and the recovery sweep sends it."""
    for run in runs:
        try:
            sender.send_run(run.id, queue=run.queue, rule_id=run.rule_id)
        except BrokerUnavailableError as exc:
            log.warning("released run %s not sent yet: %s", run.id, exc)
