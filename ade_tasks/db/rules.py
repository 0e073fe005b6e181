"""Query functions that read rules: a row, the list of them, a page of them, and a rule as the
run path needs it (`RuleSnapshot`, its document parsed once per content hash); and the values of
the rows' source and trust columns.

Writes are elsewhere: `rule_sync` (rules files -> rows), `rule_edits` (the API's changes),
`rule_trust` (an admin trusting a shared file); every change's history is `rule_versions`.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import URL, bindparam, select, text
from sqlalchemy.orm import Session

from ade_tasks.db.prepared import BinaryArray
from ade_tasks.db.schema import RuleRow
from ade_tasks.errors import InvalidInputError, NotFoundError
from ade_tasks.json_document import JsonObject
from ade_tasks.rules.rule import Rule

TRUSTED, UNTRUSTED = "trusted", "untrusted"
#: Where a rule came from: a rules file (`rule_sync`) or the API (`rule_edits`).
FILE, API = "file", "api"
#: Ids per `IN (...)` list and rows per multi-row statement: far below PostgreSQL's 65,535 bind
#: parameters and SQLite's 32,766.
BATCH = 1000


def in_batches(items: Sequence[Any]) -> list[Sequence[Any]]:
    """`items` in slices of at most `BATCH`, for statements over many rules."""
    return [items[start : start + BATCH] for start in range(0, len(items), BATCH)]


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


def enabled_by_id(session: Session) -> dict[str, bool]:
    """Every stored rule's id -> whether it is enabled (one narrow statement)."""
    rows = session.execute(select(RuleRow.id, RuleRow.enabled)).all()
    return {str(rule_id): bool(enabled) for rule_id, enabled in rows}


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


_PARSED: dict[str, Rule] = {}
_PARSED_MAX = 50_000  # above the rule count of a large cluster, or refreshes re-parse everything


def load_rule(row: RuleRow) -> Rule:
    """The validated rule document of a row."""
    return parse_document(row.content_hash, row.document)


def cached_rule(content_hash: str) -> Rule | None:
    """The parsed rule with this content hash, if this process has seen it."""
    return _PARSED.get(content_hash)


def parse_document(content_hash: str, document: JsonObject) -> Rule:
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
    content_hash: str | None = None  # of the document, as read (None: not from a row)

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
    return _snapshot(rule_id, row, session)


_SNAPSHOTS = (
    text(
        "SELECT id, version, enabled, content_hash, document, trust_state, source_file, "
        "source_hash FROM rules WHERE id IN :ids"
    )
    .bindparams(bindparam("ids", expanding=True))
    .columns(document=RuleRow.__table__.c.document.type)
)


# PostgreSQL: the ids as one binary array. An expanding IN of a beat's batch (500 ids) is a
# long statement text that psycopg parses anew on every call (a tenth of a batch's CPU).
_SNAPSHOTS_PG = text(
    "SELECT id, version, enabled, content_hash, document, trust_state, source_file, "
    "source_hash FROM rules WHERE id = ANY(CAST(:ids AS text[]))"
).columns(document=RuleRow.__table__.c.document.type)


def rule_snapshots(session: Session, rule_ids: Sequence[str]) -> dict[str, RuleSnapshot]:
    """Read many rules at once (one SELECT); ids that do not exist are absent from the result."""
    if not rule_ids:
        return {}
    ids = sorted(set(rule_ids))
    if session.get_bind().dialect.name == "postgresql":
        rows = session.execute(_SNAPSHOTS_PG, {"ids": BinaryArray(ids)})
    else:
        rows = session.execute(_SNAPSHOTS, {"ids": ids})
    return {row.id: _snapshot(row.id, row, session) for row in rows}


def _snapshot(rule_id: str, row: Any, session: Session) -> RuleSnapshot:
    rule = parse_document(row.content_hash, row.document)
    snapshot = RuleSnapshot(
        rule_id,
        row.version,
        bool(row.enabled),
        rule,
        row.trust_state,
        row.source_file,
        row.source_hash,
        row.content_hash,
    )
    if len(_SEEN) >= _PARSED_MAX:
        _SEEN.clear()
    _SEEN[session.get_bind().engine.url, rule_id] = snapshot
    return snapshot


#: The latest snapshot this process read of each rule (by database URL and rule id), for
#: dispatch to judge a trigger by without reading the rule again: its INSERT takes effect only
#: while the row still matches (`runs.insert_run_of_rule`), so a stale entry costs a re-read,
#: never a wrong admission.
_SEEN: dict[tuple[URL, str], RuleSnapshot] = {}


def seen_snapshot(database: URL, rule_id: str) -> RuleSnapshot | None:
    """The rule as this process last read it from `database` (None: not read yet, or
    forgotten)."""
    return _SEEN.get((database, rule_id))


def forget_snapshot(database: URL, rule_id: str) -> None:
    """Drop the rule's remembered snapshot (it no longer matched its row)."""
    _SEEN.pop((database, rule_id), None)
