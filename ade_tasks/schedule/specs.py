"""A beat's book of the enabled rules' schedule triggers, loaded incrementally by content hash.

A load reads only the id, content hash and `updated_at` of every enabled rule and compares them
with the last load: an unchanged rule set costs that one narrow read and nothing else. The
triggers of a rule are read (its `triggers` list only, not the whole document) only for a content
hash this book has not seen, and parsed once per distinct trigger list (100,000 rules of a few
dozen crons parse a few dozen lists). Only the triggers are validated here because a beat needs
nothing else to compute slots; the whole document is validated when an occurrence is dispatched,
which records the occurrence `skipped` with the reason if it cannot be read. At 100,000 rules
this is what makes a beat's start-up take seconds instead of a minute (docs/performance.md).

A rule whose stored triggers this version cannot read is that rule's problem (`problems`), left
out until its rule changes; the other rules are not held back by it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from pydantic import TypeAdapter, ValidationError
from sqlalchemy import func, select

from ade_tasks.cron.slots import ScheduleSpec
from ade_tasks.db.engine import SessionFactory
from ade_tasks.db.one_shots import TriggerOnce
from ade_tasks.db.rule_triggers import stored_triggers
from ade_tasks.db.schema import RuleRow
from ade_tasks.rules.loader import validation_problems
from ade_tasks.rules.triggers import ScheduleTrigger, Trigger

SpecKey = tuple[str, int, str]
#: Whose problem it is: (rule id, trigger index), or (rule id, None) for the whole rule.
ProblemKey = tuple[str, int | None]

_TABLE = RuleRow.__table__
_TRIGGERS = TypeAdapter(list[Trigger])
#: A stored trigger list -> its schedule triggers by index, or why it cannot be read.
_Parsed = tuple[tuple[int, ScheduleTrigger], ...] | str
_BY_TEXT: dict[str | None, _Parsed] = {}
_BY_TEXT_MAX = 50_000  # distinct trigger lists kept; past it, parsed again on demand
#: How often a load compares every rule even when the table's fingerprint did not move.
FULL_EVERY = 60.0
_FINGERPRINT = select(func.count(), func.max(_TABLE.c.updated_at)).where(_TABLE.c.enabled)


@dataclass(frozen=True)
class _Entry:
    """One enabled rule as the book last loaded it."""

    content_hash: str
    updated_at: datetime
    specs: tuple[ScheduleSpec, ...]
    once: tuple[TriggerOnce, ...]
    problem: str | None


class ScheduleBook:
    """The schedule triggers of the enabled rules, as one beat keeps them between refreshes."""

    def __init__(self, session_factory: SessionFactory) -> None:
        self._session_factory = session_factory
        self._entries: dict[str, _Entry] = {}
        self._triggers: dict[str, _Parsed] = {}  # content hash -> its triggers (current rules)
        self._fingerprint: tuple[object, ...] | None = None
        self._compared_at = 0.0
        self.specs: dict[SpecKey, ScheduleSpec] = {}
        self.problems: dict[ProblemKey, str] = {}

    def keys_of(self, rule_id: str) -> list[SpecKey]:
        """The cron triggers of one rule, as `specs` keys them."""
        entry = self._entries.get(rule_id)
        return [] if entry is None else [_key(spec) for spec in entry.specs]

    def once_of(self, rule_ids: Iterable[str]) -> list[TriggerOnce]:
        """The one-shot triggers of these rules."""
        return [t for r in rule_ids if (entry := self._entries.get(r)) for t in entry.once]

    def load(self) -> set[str]:
        """Catch up with the rules table; returns the ids of the rules added, edited, disabled
        or removed since the last load (all of them on the first)."""
        with self._session_factory() as session:
            # Every write of a rule sets its updated_at (sync, API edits, enabling), so when
            # neither the count nor the newest updated_at moved, nothing did; a full
            # comparison still runs every `FULL_EVERY` against clock skew between writers.
            fingerprint = tuple(session.execute(_FINGERPRINT).one())
            if (
                fingerprint == self._fingerprint
                and time.monotonic() - self._compared_at < FULL_EVERY
            ):
                return set()
            rows = session.execute(
                select(_TABLE.c.id, _TABLE.c.content_hash, _TABLE.c.updated_at).where(
                    _TABLE.c.enabled
                )
            ).all()
            current = {rule_id: (h, at) for rule_id, h, at in rows}
            changed = {
                rule_id
                for rule_id, (h, at) in current.items()
                if (entry := self._entries.get(rule_id)) is None
                or (entry.content_hash, entry.updated_at) != (h, at)
            }
            unseen = {r for r in changed if current[r][0] not in self._triggers}
            fetched = stored_triggers(session, unseen)
        removed = self._entries.keys() - current.keys()
        triggers = {h: self._triggers[h] for h, _ in current.values() if h in self._triggers}
        for content_hash, text in fetched.items():
            triggers[content_hash] = _parse(text)
        self._triggers = triggers
        for rule_id in removed:
            self._drop(rule_id)
        for rule_id in changed:
            self._drop(rule_id)
            content_hash, updated_at = current[rule_id]
            parsed = triggers.get(content_hash)
            if parsed is None:  # edited between the two reads: the next load takes it
                continue
            self._add(rule_id, _entry(rule_id, content_hash, updated_at, parsed))
        # Only now: a load that failed above is done again in full by the next one.
        self._fingerprint, self._compared_at = fingerprint, time.monotonic()
        return changed | removed

    def forget(self, rule_ids: Iterable[str]) -> None:
        """Load these rules again next time (what was done with this load failed)."""
        self._fingerprint = None
        for rule_id in rule_ids:
            self._drop(rule_id)

    def _drop(self, rule_id: str) -> None:
        entry = self._entries.pop(rule_id, None)
        if entry is None:
            return
        for spec in entry.specs:
            self.specs.pop(_key(spec), None)
        self.problems.pop((rule_id, None), None)

    def _add(self, rule_id: str, entry: _Entry) -> None:
        self._entries[rule_id] = entry
        for spec in entry.specs:
            self.specs[_key(spec)] = spec
        if entry.problem is not None:
            self.problems[(rule_id, None)] = entry.problem


def _key(spec: ScheduleSpec) -> SpecKey:
    return (spec.rule_id, spec.trigger_index, spec.cron)


def _parse(text: str | None) -> _Parsed:
    """A stored trigger list's schedule triggers by index, or why it cannot be read (parsed
    once per distinct list in this process)."""
    parsed = _BY_TEXT.get(text)
    if parsed is not None:
        return parsed
    try:
        if text is None:
            raise ValueError("the document has no triggers")
        triggers = _TRIGGERS.validate_python(json.loads(text))
    except ValidationError as exc:
        parsed = "; ".join(
            f"triggers{'' if p.field == '(document)' else '.' + p.field}: {p.reason}"
            for p in validation_problems("", exc)
        )
    except ValueError as exc:
        parsed = f"triggers: {exc}"
    else:
        parsed = tuple((i, t) for i, t in enumerate(triggers) if isinstance(t, ScheduleTrigger))
    if len(_BY_TEXT) >= _BY_TEXT_MAX:
        _BY_TEXT.clear()
    _BY_TEXT[text] = parsed
    return parsed


def _entry(rule_id: str, content_hash: str, updated_at: datetime, parsed: _Parsed) -> _Entry:
    """A rule's cron specs and one-shot triggers (or its problem) from its parsed triggers."""
    if isinstance(parsed, str):
        problem = (
            f"its stored document cannot be read ({parsed}); "
            "none of its schedules fire until the rule is fixed"
        )
        return _Entry(content_hash, updated_at, (), (), problem)
    stored_at = updated_at if updated_at.tzinfo else updated_at.replace(tzinfo=UTC)
    specs = []
    once = []
    for index, trigger in parsed:
        if trigger.cron is None:  # run_at / delay_seconds: fired once (schedule.one_shots)
            once.append(TriggerOnce(rule_id, index, trigger, stored_at))
        else:
            specs.append(trigger.spec(rule_id, index))
    return _Entry(content_hash, updated_at, tuple(specs), tuple(once), None)
