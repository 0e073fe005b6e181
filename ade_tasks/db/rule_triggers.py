"""Which enabled rules have a trigger of a given type, read without validating every rule.

Matching an event (a webhook delivery, a lane event) needs only the rules with a trigger of the
event's type, but a cluster's rules are mostly schedules. So a lookup reads the id and content
hash of every enabled rule (one narrow statement), learns each content hash's trigger types once
per process from its stored `triggers` list (JSON, not validated), and validates only the rules
that have the type, once per content hash (`rules.parse_document`). At 10,000 rules an event
used to read and validate every document, which took longer than the ingress dispatcher's
10 s matching bound on a busy machine, so no rule ran for any event (docs/performance.md,
"Cluster simulation").
"""

from __future__ import annotations

import json
import logging
from collections.abc import Collection, Iterable, Sequence
from typing import Any

from sqlalchemy import String, cast, select
from sqlalchemy.orm import Session

from ade_tasks.db.rules import in_batches, parse_document
from ade_tasks.db.schema import RuleRow
from ade_tasks.rules.rule import Rule

log = logging.getLogger(__name__)

_TABLE = RuleRow.__table__
SCAN_ABOVE = 20_000
#: Content hash -> its rule's trigger types; None: the stored list could not be read, so the
#: rule is validated (and its problem logged) like one that has the type.
_TYPES: dict[str, frozenset[str] | None] = {}
_NONE: frozenset[str] = frozenset()
_TYPES_MAX = 200_000  # above the rule count of a large cluster; past it, read again on demand


def stored_triggers(session: Session, rule_ids: Iterable[str]) -> dict[str, str | None]:
    """Content hash -> the stored `triggers` list as JSON text (None: none stored), of these
    enabled rules: looked up 1,000 ids at a time, or, past `SCAN_ABOVE` ids (a beat's first
    load at 100,000 rules), read in one scan of the enabled rules, which is cheaper than
    a hundred lookups."""
    wanted = set(rule_ids)
    triggers = cast(_TABLE.c.document["triggers"], String)
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
    session: Session, trigger_type: str | Collection[str], *, prefix: bool = False
) -> list[Rule]:
    """The enabled rules with at least one trigger of `trigger_type` (or of one of several
    types; `prefix`: of a type that starts with it, as "github." for the poller), by id. A
    stored rule this version cannot read is logged and left out; the others are not held back
    by it."""
    rows = session.execute(
        select(_TABLE.c.id, _TABLE.c.content_hash).where(_TABLE.c.enabled).order_by(_TABLE.c.id)
    ).all()
    _learn(session, rows)
    return _validated(session, _having(rows, _type_set(trigger_type), prefix))


def trigger_candidates(
    session: Session, trigger_type: str | Collection[str]
) -> tuple[list[Rule], list[str]]:
    """The enabled rules with a trigger of `trigger_type` (or of one of several types; as
    `rules_with_trigger`), and the ids of the disabled rules that have one (not validated:
    their verdict is `disabled`), read in the same one statement."""
    wanted_types = _type_set(trigger_type)
    rows = session.execute(
        select(_TABLE.c.id, _TABLE.c.content_hash, _TABLE.c.enabled).order_by(_TABLE.c.id)
    ).all()
    _learn(session, rows)
    having = [  # one comprehension over every rule: this runs for every event
        (rule_id, enabled)
        for rule_id, content_hash, enabled in rows
        if (types := _TYPES.get(content_hash, _NONE)) is None or not wanted_types.isdisjoint(types)
    ]
    wanted = [rule_id for rule_id, enabled in having if enabled]
    return _validated(session, wanted), [rule_id for rule_id, enabled in having if not enabled]


def _learn(session: Session, rows: Sequence[Sequence[Any]]) -> None:
    """Learn the trigger types of the content hashes of (id, content hash, ...) `rows` that
    were not seen yet."""
    unseen = {row[0] for row in rows if row[1] not in _TYPES}
    if unseen:
        if len(_TYPES) + len(unseen) > _TYPES_MAX:
            _TYPES.clear()
        for content_hash, stored in stored_triggers(session, unseen).items():
            _TYPES[content_hash] = _types_of(stored)


def _type_set(trigger_type: str | Collection[str]) -> frozenset[str]:
    return frozenset({trigger_type} if isinstance(trigger_type, str) else trigger_type)


def _having(
    rows: Sequence[tuple[str, str]], wanted_types: frozenset[str], prefix: bool
) -> list[str]:
    """The ids among (id, content hash) `rows` whose rule has a trigger of one of the types
    (or one whose stored triggers cannot be read without validating it)."""
    return [
        rule_id
        for rule_id, content_hash in rows
        if (types := _TYPES.get(content_hash, frozenset())) is None
        or (
            any(t.startswith(tuple(wanted_types)) for t in types)
            if prefix
            else not wanted_types.isdisjoint(types)
        )
    ]


def _validated(session: Session, wanted: list[str]) -> list[Rule]:
    rules: list[Rule] = []
    for chunk in in_batches(wanted):
        query = select(_TABLE.c.id, _TABLE.c.content_hash, _TABLE.c.document).where(
            _TABLE.c.id.in_(chunk), _TABLE.c.enabled
        )
        for rule_id, content_hash, document in session.execute(query.order_by(_TABLE.c.id)):
            try:
                rules.append(parse_document(content_hash, document))
            except ValueError as exc:  # one unreadable stored rule must not stop the others
                log.warning("rule %s is left out of event matching: %s", rule_id, exc)
    return rules


def _types_of(stored: str | None) -> frozenset[str] | None:
    """The `type` of each trigger in a stored trigger list, or None if it is not a list of
    objects with a string `type` (validating the document then says what is wrong)."""
    try:
        triggers = json.loads(stored) if stored is not None else []
    except ValueError:
        return None
    if not isinstance(triggers, list):
        return None
    types = [t.get("type") if isinstance(t, dict) else None for t in triggers]
    if not all(isinstance(kind, str) for kind in types):
        return None
    return frozenset(kind for kind in types if isinstance(kind, str))
