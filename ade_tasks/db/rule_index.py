"""Keeping the event-matching index (`rule_trigger_keys`) current: which keys each rule's
triggers are indexed under, written in the same transaction as every write of its document.

A trigger is indexed under its type and the value(s) of its model's `index_field` (a webhook's
hook, a GitHub trigger's repository, the rules a run.finished trigger follows), casefolded; a
trigger without one (its model declares none, the value is absent, or it is a glob) is indexed
under `WILDCARD`, a candidate for every event of its type. An event then reads the rules under
its types and the keys it carries, plus the wildcard (`ade_tasks.db.rule_triggers`); the
matcher still tests every candidate in full, so a key only ever narrows, never decides.

The keys are read from the stored document as JSON, not from a validated rule, so a sync of
100,000 rules does not validate them again. A rule's deletion removes its keys by the foreign
key (`ON DELETE CASCADE`); enabling and disabling write nothing here (the lookup joins
`rules.enabled`).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from typing import cast

from sqlalchemy import Table
from sqlalchemy.orm import Session

from ade_tasks.db.copy_rows import insert_rows
from ade_tasks.db.rule_index_tables import RuleTriggerKeyRow
from ade_tasks.db.rules import in_batches
from ade_tasks.rules import triggers as trigger_models
from ade_tasks.rules.triggers import TriggerDocument, canonical_trigger_type, trigger_kinds

WILDCARD = "*"
_KEYS = cast(Table, RuleTriggerKeyRow.__table__)
_MAX_KEY = 255  # the column's width; a longer value is indexed under the wildcard
_GLOB = frozenset("*?[")


def trigger_keys(document: Mapping[str, object]) -> set[tuple[str, str]]:
    """(trigger type, key) of every trigger of a stored rule document; a document whose
    `triggers` is not a list of objects with a string `type` has none for those entries (it
    cannot be validated, so it matches no event)."""
    triggers = document.get("triggers")
    keys: set[tuple[str, str]] = set()
    for trigger in triggers if isinstance(triggers, list) else ():
        if not isinstance(trigger, dict) or not isinstance(trigger.get("type"), str):
            continue
        kind = canonical_trigger_type(trigger["type"])
        field = _index_fields(trigger_models.TRIGGER_MODELS).get(kind)
        for key in _keys_of(trigger.get(field) if field else None):
            keys.add((kind, key))
    return keys


def event_key(value: str) -> str:
    """An event's value as the index keeps it (casefolded, as the triggers' values)."""
    return value.casefold()


def index_rules(
    session: Session, documents: Mapping[str, Mapping[str, object]], *, new: bool = False
) -> None:
    """Write the index rows of these rules (id -> stored document) in the caller's
    transaction, replacing the ones they had (`new`: they have none, as rules just inserted)."""
    if not documents:
        return
    if not new:
        for batch in in_batches(sorted(documents)):
            session.execute(_KEYS.delete().where(_KEYS.c.rule_id.in_(batch)))
    rows = [
        {"rule_id": rule_id, "trigger_type": kind, "match_key": key}
        for rule_id, document in documents.items()
        for kind, key in sorted(trigger_keys(document))
    ]
    insert_rows(session, _KEYS, rows)


def _keys_of(value: object) -> Iterable[str]:
    values = [value] if isinstance(value, str) else value
    if not isinstance(values, list) or not values:
        return (WILDCARD,)
    if not all(
        isinstance(v, str) and 0 < len(v) <= _MAX_KEY and not _GLOB & set(v) for v in values
    ):
        return (WILDCARD,)  # a glob or an odd value: a candidate for every event of the type
    return {event_key(v) for v in values}


@functools.lru_cache(maxsize=4)
def _index_fields(models: tuple[type[TriggerDocument], ...]) -> dict[str, str]:
    """Trigger kind -> the field its model is indexed by (kinds without one are absent)."""
    return {
        kind: model.index_field
        for model in models
        if model.index_field is not None
        for kind in trigger_kinds(model)
    }
