"""Query functions for rules."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Table, bindparam, func, select, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from ade_tasks.clock import utcnow
from ade_tasks.db.schema import RuleRow, RuleVersionRow, RunRow, TrustedHashRow
from ade_tasks.errors import ConflictError, InvalidInputError, NotFoundError
from ade_tasks.rules.loader import LoadedRule, content_hash
from ade_tasks.rules.rule import Rule
from ade_tasks.states import RunStatus


@dataclass
class SyncReport:
    """What a sync of rule files changed in the database."""

    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)


def get_rule(session: Session, rule_id: str) -> RuleRow:
    """The rule row, or NotFoundError naming the id."""
    row = session.get(RuleRow, rule_id)
    if row is None:
        raise rule_not_found(rule_id)
    return row


def rule_not_found(rule_id: str) -> NotFoundError:
    """The error for an unknown rule id, with what to do about it."""
    return NotFoundError(
        f"rule {rule_id!r} does not exist; list rules with `ade-tasks rules list` "
        "or add it to the rules directory and run `ade-tasks rules sync`"
    )


def list_rules(session: Session) -> Sequence[RuleRow]:
    """Every rule, by id."""
    return session.scalars(select(RuleRow).order_by(RuleRow.id)).all()


TRUSTED, UNTRUSTED = "trusted", "untrusted"
#: Where a rule came from, and the kinds of change its version history records.
FILE, API = "file", "api"
CREATED, UPDATED, DELETED = "created", "updated", "deleted"
SYNC_ACTOR = "rules sync"


def trusted_hashes(session: Session, hashes: set[str]) -> set[str]:
    """Which of these shared-file hashes an admin has trusted."""
    if not hashes:
        return set()
    found: set[str] = set()
    for batch in _batches(sorted(hashes)):
        found.update(
            session.scalars(
                select(TrustedHashRow.content_hash).where(TrustedHashRow.content_hash.in_(batch))
            )
        )
    return found


def trust_hash(session: Session, content_hash: str, by: str) -> list[str]:
    """Trust a shared rules file's content; returns the ids of the rules it releases.

    Only a hash that some synced rule came from can be trusted, so a typo never trusts a file
    nobody reviewed.
    """
    rows = session.scalars(select(RuleRow).where(RuleRow.source_hash == content_hash)).all()
    if not rows:
        raise NotFoundError(
            f"no synced rule comes from a shared rules file with sha256 {content_hash}; "
            "list the untrusted ones with `ade-tasks rules list`"
        )
    if session.get(TrustedHashRow, content_hash) is None:
        session.add(
            TrustedHashRow(
                content_hash=content_hash,
                trusted_by=by,
                trusted_at=utcnow(),
                source_file=rows[0].source_file,
            )
        )
    for row in rows:
        row.trust_state = TRUSTED
    return sorted(row.id for row in rows)


_PARSED: dict[str, Rule] = {}
_PARSED_MAX = 50_000  # above the rule count of a large cluster, or refreshes re-parse everything


def load_rule(row: RuleRow) -> Rule:
    """The validated rule document of a row."""
    return parse_document(row.content_hash, row.document)


def cached_rule(content_hash: str) -> Rule | None:
    """The parsed rule with this content hash, if this process has seen it."""
    return _PARSED.get(content_hash)


def parse_document(content_hash: str, document: dict[str, Any]) -> Rule:
    """Validate a stored rule document, once per content hash (rules are immutable values)."""
    rule = _PARSED.get(content_hash)
    if rule is None:
        if len(_PARSED) >= _PARSED_MAX:
            _PARSED.clear()
        rule = _PARSED[content_hash] = Rule.model_validate(document)
    return rule


@dataclass(frozen=True)
class RuleSnapshot:
    """A rule as the run path needs it: its current version, state and parsed document."""

    id: str
    version: int
    enabled: bool
    rule: Rule
    trust_state: str = "trusted"
    source_file: str | None = None
    source_hash: str | None = None

    def untrusted_reason(self) -> str | None:
        """Why the rule may not run until an admin trusts its shared file (None: it may)."""
        if self.trust_state != UNTRUSTED:
            return None
        return untrusted_reason(self.id, self.source_file, self.source_hash)


def untrusted_reason(rule_id: str, source_file: str | None, source_hash: str | None) -> str:
    """The refusal for a rule from a shared rules file that no admin trusted yet."""
    return (
        f"rule {rule_id!r} comes from the shared rules file {source_file} (sha256 "
        f"{source_hash}), which no admin has trusted since it last changed; review the file, "
        f"then run `ade-tasks rules trust {source_hash}`"
    )


_SNAPSHOT = text(
    "SELECT version, enabled, content_hash, document, trust_state, source_file, source_hash "
    "FROM rules WHERE id = :id"
).columns(document=RuleRow.__table__.c.document.type)


def rule_snapshot(session: Session, rule_id: str) -> RuleSnapshot:
    """Read one rule for dispatch or execution (one prepared SELECT; the parse is cached)."""
    row = session.execute(_SNAPSHOT, {"id": rule_id}).first()
    if row is None:
        raise rule_not_found(rule_id)
    return _snapshot(rule_id, row)


_SNAPSHOTS = (
    text(
        "SELECT id, version, enabled, content_hash, document, trust_state, source_file, "
        "source_hash FROM rules WHERE id IN :ids"
    )
    .bindparams(bindparam("ids", expanding=True))
    .columns(document=RuleRow.__table__.c.document.type)
)


def rule_snapshots(session: Session, rule_ids: Sequence[str]) -> dict[str, RuleSnapshot]:
    """Read many rules at once (one SELECT); ids that do not exist are absent from the result."""
    if not rule_ids:
        return {}
    rows = session.execute(_SNAPSHOTS, {"ids": sorted(set(rule_ids))})
    return {row.id: _snapshot(row.id, row) for row in rows}


def _snapshot(rule_id: str, row: Any) -> RuleSnapshot:
    rule = parse_document(row.content_hash, row.document)
    return RuleSnapshot(
        rule_id,
        row.version,
        bool(row.enabled),
        rule,
        row.trust_state,
        row.source_file,
        row.source_hash,
    )


#: Ids per `IN (...)` list and rows per multi-row statement: far below PostgreSQL's 65,535 bind
#: parameters and SQLite's 32,766.
SYNC_BATCH = 1000

_RULES = cast(Table, RuleRow.__table__)
_VERSIONS = cast(Table, RuleVersionRow.__table__)
#: What a sync compares set-wise: every rule's state without its document.
_SYNC_STATE = select(
    RuleRow.id,
    RuleRow.version,
    RuleRow.source,
    RuleRow.source_file,
    RuleRow.content_hash,
    RuleRow.source_hash,
    RuleRow.trust_state,
).order_by(RuleRow.id)


def _batches(items: Sequence[Any]) -> list[Sequence[Any]]:
    return [items[start : start + SYNC_BATCH] for start in range(0, len(items), SYNC_BATCH)]


def sync_file_rules(
    session: Session,
    loaded: Sequence[LoadedRule],
    *,
    remove_missing: bool,
    by: str = SYNC_ACTOR,
) -> SyncReport:
    """Make the file-sourced rules in the database match `loaded`.

    A rule whose document changed gets a new version. File rules no longer present are deleted
    only when `remove_missing` is set: the caller passes False when any file failed to load, so a
    rule whose file is temporarily broken is kept rather than silently dropped. Every added,
    changed or removed rule gets a row in its version history, recorded as made by `by`.

    In bulk, so 100,000 rules sync in seconds: the rows are locked and compared by content hash
    without reading their documents, and what changed is written with one multi-row statement
    per `SYNC_BATCH` rows (an unchanged directory writes nothing).
    """
    report = SyncReport()
    now = utcnow()
    existing = {row.id: row for row in session.execute(_SYNC_STATE.with_for_update())}
    trusted = trusted_hashes(session, {item.file_hash for item in loaded if item.file_hash})
    later = next_versions(
        session, [item.rule.id for item in loaded if item.rule.id not in existing]
    )
    inserts: list[dict[str, Any]] = []
    updates: list[dict[str, Any]] = []
    trust_changes: list[dict[str, Any]] = []
    versions: list[dict[str, Any]] = []
    for item in loaded:
        rule_id = item.rule.id
        row = existing.get(rule_id)
        trust = TRUSTED if item.file_hash is None or item.file_hash in trusted else UNTRUSTED
        changed = row is None or (row.content_hash, row.source_file) != (
            item.content_hash,
            item.source_file,
        )
        if row is not None and (row.source_hash, row.trust_state) != (item.file_hash, trust):
            # An edited shared file: its trust is revoked (written with the update if any).
            trust_changes.append({"b_id": rule_id, "source_hash": item.file_hash, "trust": trust})
        if not changed:
            report.unchanged.append(rule_id)
            continue
        document = item.rule.document()
        state = {
            "source": FILE,
            "source_file": item.source_file,
            "content_hash": item.content_hash,
            "enabled": item.rule.enabled,
            "document": document,
            "updated_at": now,
        }
        if row is None:
            version = later.get(rule_id, 1)
            inserts.append(
                state
                | {
                    "id": rule_id,
                    "version": version,
                    "trust_state": trust,
                    "source_hash": item.file_hash,
                    "created_at": now,
                }
            )
            report.added.append(rule_id)
        else:
            version = row.version + 1
            updates.append(state | {"b_id": rule_id, "version": version})
            report.updated.append(rule_id)
        versions.append(_version(rule_id, version, CREATED if row is None else UPDATED, state, by))
    if trust_changes:
        session.execute(
            _RULES.update()
            .where(_RULES.c.id == bindparam("b_id"))
            .values(source_hash=bindparam("source_hash"), trust_state=bindparam("trust")),
            trust_changes,
        )
    if updates:
        columns = ("source", "source_file", "content_hash", "enabled", "document", "updated_at")
        statement = (
            _RULES.update()
            .where(_RULES.c.id == bindparam("b_id"))
            .values(version=bindparam("version"), **{name: bindparam(name) for name in columns})
        )
        for batch in _batches(updates):
            session.execute(statement, batch)
    if remove_missing:
        present = {item.rule.id for item in loaded}
        gone = [rid for rid, row in existing.items() if row.source == FILE and rid not in present]
        versions.extend(_deletions(session, gone, {rid: existing[rid].version for rid in gone}, by))
        for batch in _batches(gone):
            session.execute(_RULES.delete().where(_RULES.c.id.in_(batch)))
        report.removed.extend(gone)
    for batch in _batches(inserts):
        session.execute(_RULES.insert(), batch)
    for batch in _batches(versions):
        session.execute(_VERSIONS.insert(), batch)
    return report


def _version(
    rule_id: str, version: int, change: str, state: dict[str, Any], by: str
) -> dict[str, Any]:
    """A `rule_versions` row of a rule in `state` (its source, file, hash and document)."""
    return {
        "rule_id": rule_id,
        "version": version,
        "change": change,
        "source": state["source"],
        "source_file": state["source_file"],
        "content_hash": state["content_hash"],
        "document": state["document"],
        "changed_by": by,
        "changed_at": state["updated_at"],
    }


def _deletions(
    session: Session, rule_ids: Sequence[str], current: dict[str, int], by: str
) -> list[dict[str, Any]]:
    """The `deleted` history rows of rules about to be removed (as `_record_deletion` writes)."""
    rows: list[dict[str, Any]] = []
    now = utcnow()
    history = next_versions(session, rule_ids)
    for batch in _batches(rule_ids):
        for row in session.execute(
            select(RuleRow.id, RuleRow.source, RuleRow.source_file, RuleRow.content_hash)
            .add_columns(RuleRow.document)
            .where(RuleRow.id.in_(batch))
        ):
            version = max(current[row.id], history.get(row.id, 0) - 1) + 1
            state = {
                "source": row.source,
                "source_file": row.source_file,
                "content_hash": row.content_hash,
                "document": row.document,
                "updated_at": now,
            }
            rows.append(_version(row.id, version, DELETED, state, by))
    return rows


# --- rules written through the API, and the version history of every rule -------------------

#: A rule with a run in one of these may not be deleted (the run still reads its rule).
UNFINISHED = (RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.WAITING)


def record_version(
    session: Session, row: RuleRow, change: str, by: str, at: datetime, version: int | None = None
) -> None:
    """Append the row's current version (or `version`) to its rule's history."""
    session.add(
        RuleVersionRow(
            rule_id=row.id,
            version=row.version if version is None else version,
            change=change,
            source=row.source,
            source_file=row.source_file,
            content_hash=row.content_hash,
            document=row.document,
            changed_by=by,
            changed_at=at,
        )
    )


def next_versions(session: Session, rule_ids: Sequence[str]) -> dict[str, int]:
    """The version a re-created rule starts at (after its history), for ids that have one."""
    if not rule_ids:
        return {}
    found: dict[str, int] = {}
    for batch in _batches(sorted(set(rule_ids))):
        rows = session.execute(
            select(RuleVersionRow.rule_id, func.max(RuleVersionRow.version))
            .where(RuleVersionRow.rule_id.in_(batch))
            .group_by(RuleVersionRow.rule_id)
        )
        found.update((rule_id, int(version) + 1) for rule_id, version in rows)
    return found


def _record_deletion(session: Session, row: RuleRow, by: str, at: datetime) -> int:
    version = max(row.version, next_versions(session, [row.id]).get(row.id, 0) - 1) + 1
    record_version(session, row, DELETED, by, at, version)
    return version


def _file_backed(row: RuleRow, what: str) -> ConflictError:
    return ConflictError(
        f"rule {row.id!r} comes from the rules file {row.source_file}, so the API does not "
        f"{what} it (the next `ade-tasks rules sync` would undo that); edit or remove the rule "
        "in its file and run `ade-tasks rules sync`"
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
    version = _record_deletion(session, row, by, utcnow())
    session.delete(row)
    return version


def list_versions(
    session: Session, rule_id: str, *, limit: int = 50, cursor: str | None = None
) -> tuple[Sequence[RuleVersionRow], str | None]:
    """A rule's history, newest first, a page at a time (also of a deleted rule); NotFoundError
    when the id never existed."""
    stmt = select(RuleVersionRow).where(RuleVersionRow.rule_id == rule_id)
    if cursor is not None:
        if not cursor.isdigit():
            raise InvalidInputError(
                f"cursor {cursor!r} is not valid; pass the `next_cursor` of a previous page"
            )
        stmt = stmt.where(RuleVersionRow.version < int(cursor))
    rows = session.scalars(stmt.order_by(RuleVersionRow.version.desc()).limit(limit + 1)).all()
    if not rows and cursor is None and session.get(RuleRow, rule_id) is None:
        raise rule_not_found(rule_id)
    if len(rows) > limit:
        return rows[:limit], str(rows[limit - 1].version)
    return rows, None


def encode_rule_cursor(rule_id: str) -> str:
    """An opaque cursor pointing after `rule_id` in id order."""
    return base64.urlsafe_b64encode(rule_id.encode()).decode().rstrip("=")


def list_rules_page(
    session: Session, *, limit: int, cursor: str | None = None
) -> tuple[Sequence[RuleRow], str | None]:
    """Rules by id, a page at a time: the page and the cursor of the next (None: last page)."""
    stmt = select(RuleRow).order_by(RuleRow.id)
    if cursor is not None:
        try:
            after = base64.b64decode(
                cursor + "=" * (-len(cursor) % 4), b"-_", validate=True
            ).decode()
        except (binascii.Error, UnicodeDecodeError, ValueError) as exc:
            raise InvalidInputError(
                f"cursor {cursor!r} is not valid; pass the `next_cursor` of a previous page"
            ) from exc
        stmt = stmt.where(RuleRow.id > after)
    rows = session.scalars(stmt.limit(limit + 1)).all()
    if len(rows) > limit:
        return rows[:limit], encode_rule_cursor(rows[limit - 1].id)
    return rows, None
