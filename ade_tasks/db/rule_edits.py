"""Rule changes made through the API: create, update, enable or disable, delete.

A rule from a rules file is changed in its file (and `ade-tasks rules sync`), never through the
API, which refuses it; only enabling and disabling apply to every rule.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from ade_tasks.clock import utcnow
from ade_tasks.db.rule_index import index_rules
from ade_tasks.db.rule_versions import (
    CREATED,
    DELETED,
    UPDATED,
    deletion_versions,
    next_versions,
    record_version,
)
from ade_tasks.db.rules import API, FILE, TRUSTED, rule_not_found
from ade_tasks.db.schema import RuleRow, RunRow
from ade_tasks.errors import ConflictError, InvalidInputError
from ade_tasks.rules.loader import content_hash
from ade_tasks.rules.rule import Rule
from ade_tasks.states import RunStatus

#: A rule with a run in one of these may not be deleted (the run still reads its rule).
UNFINISHED = (RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.WAITING)


def _file_backed(row: RuleRow, what: str) -> ConflictError:
    return ConflictError(
        f"rule {row.id!r} comes from the rules file {row.source_file}, so the API does not "
        f"{what} it (the next `ade-tasks rules sync` would undo that); edit or remove the rule "
        "in its file and run `ade-tasks rules sync`, or with an admin token "
        "`ade-tasks rules push DIR`"
    )


def _locked(session: Session, rule_id: str) -> RuleRow:
    row = session.get(RuleRow, rule_id, with_for_update=True)
    if row is None:
        raise rule_not_found(rule_id)
    return row


def create_rule(session: Session, rule: Rule, by: str) -> RuleRow:
    """Add a rule written through the API (source `api`): version 1, or the version after its
    history if a rule with this id existed before. ConflictError when the id is taken."""
    existing = session.get(RuleRow, rule.id)
    if existing is not None:
        where = f"the rules file {existing.source_file}" if existing.source == FILE else "the API"
        raise ConflictError(
            f"rule {rule.id!r} already exists (from {where}); change it with "
            f"`PUT /api/v1/rules/{rule.id}` (`ade-tasks rules update`) or pick another id"
        )
    now = utcnow()
    document = rule.document()
    row = RuleRow(
        id=rule.id,
        version=next_versions(session, [rule.id]).get(rule.id, 1),
        source=API,
        source_file=None,
        content_hash=content_hash(document),
        enabled=rule.enabled,
        document=document,
        trust_state=TRUSTED,
        source_hash=None,
        created_at=now,
        updated_at=now,
    )
    session.add(row)
    record_version(session, row, CREATED, by, now)
    try:
        session.flush()
    except IntegrityError as exc:
        raise ConflictError(
            f"rule {rule.id!r} was created by another call at the same time; fetch it with "
            f"`GET /api/v1/rules/{rule.id}`"
        ) from exc
    index_rules(session, {row.id: document}, new=True)
    return row


def update_rule(
    session: Session, rule_id: str, rule: Rule, by: str, *, keep_enabled: bool = False
) -> tuple[RuleRow, bool]:
    """Replace an API rule's document; a changed document is a new version. Returns the row and
    whether anything changed. `keep_enabled` (the new document did not say): the rule stays
    enabled or disabled as it is. Rules from files are refused: their file is the source of
    truth."""
    if rule.id != rule_id:
        raise InvalidInputError(f"id: {rule.id!r} is not the rule being updated ({rule_id!r})")
    row = _locked(session, rule_id)
    if row.source != API:
        raise _file_backed(row, "change")
    if keep_enabled and rule.enabled != row.enabled:
        rule = rule.model_copy(update={"enabled": row.enabled})
    document = rule.document()
    new_hash = content_hash(document)
    if new_hash == row.content_hash:
        changed = row.enabled != rule.enabled
        row.enabled = rule.enabled
        if changed:
            row.updated_at = utcnow()
        return row, changed
    now = utcnow()
    row.version += 1
    row.content_hash = new_hash
    row.document = document
    row.enabled = rule.enabled
    row.updated_at = now
    record_version(session, row, UPDATED, by, now)
    session.flush()
    index_rules(session, {row.id: document})
    return row, True


def set_enabled(session: Session, rule_id: str, enabled: bool) -> tuple[RuleRow, bool]:
    """Enable or disable a rule (any source; not a new version: the document is unchanged). For a
    rule from a file, the file's `enabled` applies again the next time the file changes."""
    row = _locked(session, rule_id)
    changed = row.enabled != enabled
    if changed:
        row.enabled = enabled
        row.updated_at = utcnow()
    return row, changed


def delete_rule(session: Session, rule_id: str, by: str) -> int:
    """Delete an API rule; its runs, occurrences and version history stay (the history gets a
    `deleted` entry, whose version is returned). Refused while a run of it is unfinished, and for
    rules from files (remove the file instead)."""
    row = _locked(session, rule_id)
    if row.source != API:
        raise _file_backed(row, "delete")
    unfinished = session.scalars(
        select(RunRow.id)
        .where(RunRow.rule_id == rule_id, RunRow.status.in_(UNFINISHED))
        .order_by(RunRow.queued_at)
        .limit(5)
    ).all()
    if unfinished:
        raise ConflictError(
            f"rule {rule_id!r} has unfinished runs ({', '.join(unfinished)}); disable it so no new "
            "runs start, cancel them (`ade-tasks runs cancel RUN_ID`) or wait for them to end, "
            "then delete it"
        )
    version = deletion_versions(session, {row.id: row.version})[row.id]
    record_version(session, row, DELETED, by, utcnow(), version)
    session.delete(row)
    return version
