"""Which rules can match an event, read from the event-matching index without touching the
others (`ade_tasks.db.rule_index`).

An event's lookup is one statement over the index: the rules with a trigger of one of its types
indexed under one of the keys it carries or under the wildcard, joined with `rules` for their
content hash and `enabled`. Only those candidates are validated, once per content hash per
process (`rules.parse_document`); a warm lookup reads no document at all. So an event's cost
follows the rules that can match it, not the rules stored: at 30,000 rules, mostly schedules,
a webhook event used to read every rule's id and hash (docs/performance.md, "Event matching").
The matcher still tests each candidate in full. The schedule book's bulk read of stored
trigger lists (`stored_triggers`) lives here too.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable, Sequence
from typing import Any, cast

from sqlalchemy import String, Table, or_, select
from sqlalchemy import cast as sql_cast
from sqlalchemy.orm import Session

from ade_tasks.db.rule_index import WILDCARD, event_key
from ade_tasks.db.rule_index_tables import RuleTriggerKeyRow
from ade_tasks.db.rules import cached_rule, in_batches, parse_document
from ade_tasks.db.schema import RuleRow
from ade_tasks.rules.rule import Rule

log = logging.getLogger(__name__)

_TABLE = cast(Table, RuleRow.__table__)
_KEYS = cast(Table, RuleTriggerKeyRow.__table__)
SCAN_ABOVE = 20_000


def stored_triggers(session: Session, rule_ids: Iterable[str]) -> dict[str, str | None]:
    """Content hash -> the stored `triggers` list as JSON text (None: none stored), of these
    enabled rules: looked up 1,000 ids at a time, or, past `SCAN_ABOVE` ids (a beat's first
    load at 100,000 rules), read in one scan of the enabled rules, which is cheaper than
    a hundred lookups."""
    wanted = set(rule_ids)
    triggers = sql_cast(_TABLE.c.document["triggers"], String)
    query = select(_TABLE.c.id, _TABLE.c.content_hash, triggers)
    found: dict[str, str | None] = {}
    if len(wanted) > SCAN_ABOVE:
        for rule_id, content_hash, stored in session.execute(query.where(_TABLE.c.enabled)):
            if rule_id in wanted:
                found[content_hash] = stored
        return found
    for chunk in in_batches(sorted(wanted)):
        for _, content_hash, stored in session.execute(query.where(_TABLE.c.id.in_(chunk))):
            found[content_hash] = stored
    return found


def rules_with_trigger(
    session: Session,
    trigger_type: str | Collection[str],
    *,
    keys: Collection[str] | None = None,
    prefix: bool = False,
) -> list[Rule]:
    """The enabled rules with at least one trigger of `trigger_type` (or of one of several
    types; `prefix`: of a type that starts with it, as "github." for the poller) that an event
    carrying `keys` may start (None: every such rule), by id. A stored rule this version
    cannot read is logged and left out; the others are not held back by it."""
    return _validated(session, _candidates(session, trigger_type, keys, prefix, enabled=True))


def trigger_candidates(
    session: Session, trigger_type: str | Collection[str], keys: Collection[str] | None = None
) -> tuple[list[Rule], list[str]]:
    """The enabled rules `rules_with_trigger` gives, and the ids of the disabled rules it
    would give if they were enabled (not validated: their verdict is `disabled`), read in the
    same one statement."""
    rows = _candidates(session, trigger_type, keys, prefix=False, enabled=False)
    enabled = [row for row in rows if row.enabled]
    return _validated(session, enabled), [row.id for row in rows if not row.enabled]


def _candidates(
    session: Session,
    trigger_type: str | Collection[str],
    keys: Collection[str] | None,
    prefix: bool,
    *,
    enabled: bool,
) -> Sequence[Any]:
    """(id, content hash, enabled) of the rules indexed under the types and keys, by id."""
    types = sorted({trigger_type} if isinstance(trigger_type, str) else set(trigger_type))
    kind = _KEYS.c.trigger_type
    query = (
        select(_TABLE.c.id, _TABLE.c.content_hash, _TABLE.c.enabled)
        .select_from(_KEYS.join(_TABLE, _TABLE.c.id == _KEYS.c.rule_id))
        .where(
            or_(*(kind.startswith(t, autoescape=True) for t in types))
            if prefix
            else kind.in_(types)
        )
        .distinct()
        .order_by(_TABLE.c.id)
    )
    if keys is not None:
        query = query.where(_KEYS.c.match_key.in_(sorted({WILDCARD, *map(event_key, keys)})))
    if enabled:
        query = query.where(_TABLE.c.enabled)
    return session.execute(query).all()


def _validated(session: Session, rows: Sequence[Any]) -> list[Rule]:
    """The rules of (id, content hash, ...) `rows`, by id: parsed ones from this process's
    cache, the others read and validated (enabled ones only: one changed meanwhile is read as
    it is now)."""
    found: dict[str, Rule] = {}
    unread = []
    for row in rows:
        rule = cached_rule(row.content_hash)
        if rule is None:
            unread.append(row.id)
        else:
            found[row.id] = rule
    for chunk in in_batches(unread):
        query = select(_TABLE.c.id, _TABLE.c.content_hash, _TABLE.c.document).where(
            _TABLE.c.id.in_(chunk), _TABLE.c.enabled
        )
        for rule_id, content_hash, document in session.execute(query):
            try:
                found[rule_id] = parse_document(content_hash, document)
            except ValueError as exc:  # one unreadable stored rule must not stop the others
                log.warning("rule %s is left out of event matching: %s", rule_id, exc)
    return [found[rule_id] for rule_id in sorted(found)]
