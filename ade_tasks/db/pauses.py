"""Query functions for pauses: a rule, or one trigger of it, held with a note and who held it.

A paused rule's automatic triggers (schedules, webhooks, git and lane events) are refused at
admission with the pause's note, so a paused schedule slot is recorded `skipped` with it; a
paused trigger refuses only what that trigger would fire. Manual runs are never paused (the
operator asked for the run, as for a disabled rule). A run already running when the pause is
set finishes as it would have.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from ade_tasks.clock import utcnow
from ade_tasks.db import rules as rules_db
from ade_tasks.db.prepared import one_of
from ade_tasks.db.schema import WHOLE_RULE, RulePauseRow
from ade_tasks.errors import InvalidInputError, NotFoundError
from ade_tasks.rules.triggers import TriggerType

NOTE_MAX = 1000


@dataclass(frozen=True)
class Pause:
    """One pause as admission reads it."""

    rule_id: str
    trigger_index: int | None  # None: the whole rule
    note: str
    paused_by: str
    paused_at: datetime

    @property
    def reason(self) -> str:
        """The refusal of a trigger this pause holds (what a skipped slot records)."""
        at = f"{self.paused_at:%Y-%m-%d %H:%M} UTC"
        if self.trigger_index is None:
            what, resume = f"rule {self.rule_id!r} is", f"`ade-tasks rules resume {self.rule_id}`"
        else:
            what = f"trigger #{self.trigger_index} of rule {self.rule_id!r} is"
            resume = f"`ade-tasks rules resume {self.rule_id} --trigger {self.trigger_index}`"
        return f"{what} paused by {self.paused_by} since {at}: {self.note}; resume with {resume}"


def _pause(row: RulePauseRow) -> Pause:
    index = None if row.trigger_index == WHOLE_RULE else row.trigger_index
    return Pause(row.rule_id, index, row.note, row.paused_by, row.paused_at)


def pause(session: Session, rule_id: str, trigger_index: int | None, note: str, by: str) -> Pause:
    """Pause the rule (`trigger_index` None) or one of its triggers; pausing again replaces the
    note. InvalidInputError for an empty note or a trigger the rule does not have or that is
    `manual` (manual runs are never paused); NotFoundError for an unknown rule."""
    row = rules_db.get_rule(session, rule_id)
    note = note.strip()
    if not note:
        raise InvalidInputError(
            f"pausing rule {rule_id!r} needs a note saying why (note: is empty); "
            "say why, e.g. `--note 'deploy freeze until Monday'`"
        )
    if len(note) > NOTE_MAX:
        raise InvalidInputError(
            f"the note of a pause of rule {rule_id!r} has {len(note)} characters; "
            f"keep it to {NOTE_MAX}"
        )
    if trigger_index is not None:
        triggers = rules_db.load_rule(row).triggers
        if not 0 <= trigger_index < len(triggers):
            raise InvalidInputError(
                f"rule {rule_id!r} has no trigger #{trigger_index} (trigger_index: it has "
                f"{len(triggers)} trigger(s), numbered from 0); see `ade-tasks rules show "
                f"{rule_id}`"
            )
        if triggers[trigger_index].type == TriggerType.MANUAL:
            raise InvalidInputError(
                f"trigger #{trigger_index} of rule {rule_id!r} is manual, and manual runs are "
                "never paused (trigger_index); pause another trigger or the whole rule"
            )
    index = WHOLE_RULE if trigger_index is None else trigger_index
    session.execute(
        delete(RulePauseRow).where(
            RulePauseRow.rule_id == rule_id, RulePauseRow.trigger_index == index
        )
    )
    added = RulePauseRow(
        rule_id=rule_id, trigger_index=index, note=note, paused_by=by[:255], paused_at=utcnow()
    )
    session.add(added)
    session.flush()
    return _pause(added)


def resume(session: Session, rule_id: str, trigger_index: int | None) -> Pause:
    """Lift a pause; returns it. NotFoundError when the rule (or that trigger) is not paused."""
    rules_db.get_rule(session, rule_id)
    index = WHOLE_RULE if trigger_index is None else trigger_index
    row = session.get(RulePauseRow, (rule_id, index))
    if row is None:
        what = (
            f"rule {rule_id!r}"
            if trigger_index is None
            else (f"trigger #{trigger_index} of rule {rule_id!r}")
        )
        held = ", ".join(_scope(p) for p in pauses_of(session, [rule_id]).get(rule_id, []))
        raise NotFoundError(
            f"{what} is not paused, so there is nothing to resume"
            + (f" (paused: {held})" if held else "")
        )
    found = _pause(row)
    session.delete(row)
    return found


def _scope(found: Pause) -> str:
    return "the whole rule" if found.trigger_index is None else f"trigger #{found.trigger_index}"


def pauses_of(session: Session, rule_ids: Iterable[str]) -> dict[str, list[Pause]]:
    """The pauses of these rules (one SELECT), whole-rule pause first."""
    ids = sorted(set(rule_ids))
    found: dict[str, list[Pause]] = {}
    if not ids:
        return found
    for start in range(0, len(ids), 1000):
        chunk = ids[start : start + 1000]
        rows = session.scalars(
            select(RulePauseRow)
            .where(one_of(RulePauseRow.rule_id, chunk, session.get_bind().dialect))
            .order_by(RulePauseRow.rule_id, RulePauseRow.trigger_index)
        )
        for row in rows:
            found.setdefault(row.rule_id, []).append(_pause(row))
    return found


def every_pause(session: Session) -> dict[str, list[Pause]]:
    """Every pause the cluster holds, by rule (one SELECT; a row per paused rule or trigger,
    so a small table), whole-rule pause first."""
    found: dict[str, list[Pause]] = {}
    rows = session.scalars(
        select(RulePauseRow).order_by(RulePauseRow.rule_id, RulePauseRow.trigger_index)
    )
    for row in rows:
        found.setdefault(row.rule_id, []).append(_pause(row))
    return found


def holding(pauses: Sequence[Pause], trigger_indexes: Sequence[int] | None) -> Pause | None:
    """The pause that refuses a trigger: the whole rule's, else, when every trigger the event
    matched (`trigger_indexes`; None: not known) is paused, the first of theirs."""
    by_index = {p.trigger_index: p for p in pauses}
    if None in by_index:
        return by_index[None]
    if trigger_indexes and all(index in by_index for index in trigger_indexes):
        return by_index[trigger_indexes[0]]
    return None
