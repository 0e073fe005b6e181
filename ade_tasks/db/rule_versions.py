"""Query functions of the rules' version history (`rule_versions`): every created, updated or
deleted rule, from a file or the API, appends one row saying what it was and who changed it.

The history outlives its rule: a rule deleted and created again continues after it.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import func, select, text
from sqlalchemy.orm import Session

from ade_tasks.db.prepared import BinaryArray
from ade_tasks.db.rules import in_batches, rule_not_found
from ade_tasks.db.schema import RuleRow, RuleVersionRow
from ade_tasks.errors import InvalidInputError
from ade_tasks.json_document import JsonObject

#: The kinds of change the history records.
CREATED, UPDATED, DELETED = "created", "updated", "deleted"


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


def version_values(
    rule_id: str, version: int, change: str, state: JsonObject, by: str
) -> JsonObject:
    """A `rule_versions` row of a rule in `state` (its source, file, hash and document), for
    the bulk inserts of a sync (`record_version` is the same row for one ORM rule)."""
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


#: `next_versions` on PostgreSQL: every id in one array parameter. The expanding `IN` of the
#: batches below cost about 30 µs of client CPU an id to render (3.4 s of a first sync of
#: 100,000 rules, 2026-12-03), the array a few milliseconds in all.
_LAST_VERSIONS_PG = text(
    "SELECT rule_id, max(version) FROM rule_versions "
    "WHERE rule_id = ANY(CAST(:ids AS text[])) GROUP BY rule_id"
)


def next_versions(session: Session, rule_ids: Sequence[str]) -> dict[str, int]:
    """The version a re-created rule starts at (after its history), for ids that have one."""
    if not rule_ids:
        return {}
    ids = sorted(set(rule_ids))
    if session.get_bind().dialect.name == "postgresql":
        rows = session.execute(_LAST_VERSIONS_PG, {"ids": BinaryArray(ids)})
        return {rule_id: int(version) + 1 for rule_id, version in rows}
    found: dict[str, int] = {}
    for batch in in_batches(ids):
        rows = session.execute(
            select(RuleVersionRow.rule_id, func.max(RuleVersionRow.version))
            .where(RuleVersionRow.rule_id.in_(batch))
            .group_by(RuleVersionRow.rule_id)
        )
        found.update((rule_id, int(version) + 1) for rule_id, version in rows)
    return found


def deletion_versions(session: Session, current: dict[str, int]) -> dict[str, int]:
    """The version of each rule's `deleted` entry (rule id -> its current version): after both
    its current version and everything its history holds."""
    history = next_versions(session, list(current))
    return {
        rule_id: max(version, history.get(rule_id, 0) - 1) + 1
        for rule_id, version in current.items()
    }


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
