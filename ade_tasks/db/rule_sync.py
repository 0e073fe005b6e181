"""Syncing rules files into the database: the file-sourced rule rows made to match what the
rules directory holds, in bulk, with a history entry for every change.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import cast

from sqlalchemy import Table, bindparam, select, text
from sqlalchemy.orm import Session

from ade_tasks.clock import utcnow
from ade_tasks.db.copy_rows import JsonText, insert_rows
from ade_tasks.db.prepared import BinaryArray
from ade_tasks.db.rule_index import index_rules
from ade_tasks.db.rule_trust import trusted_hashes
from ade_tasks.db.rule_versions import (
    CREATED,
    DELETED,
    UPDATED,
    deletion_versions,
    next_versions,
    version_values,
)
from ade_tasks.db.rules import FILE, TRUSTED, UNTRUSTED, in_batches
from ade_tasks.db.schema import RuleRow, RuleVersionRow
from ade_tasks.json_document import JsonObject
from ade_tasks.rules.file_digests import KnownRule
from ade_tasks.rules.loader import LoadedRule

SYNC_ACTOR = "rules sync"

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
    RuleRow.file_digest,
).order_by(RuleRow.id)


@dataclass
class SyncReport:
    """What a sync of rule files changed in the database."""

    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)


#: The PostgreSQL advisory lock that serializes writers of the file rules (syncs and pushes),
#: so a push compares its base revision with what no one else is changing ("RULF").
FILE_RULES_LOCK = 0x5255_4C46


def lock_file_rules(session: Session) -> None:
    """Hold the file rules' lock until the transaction ends (PostgreSQL; SQLite has one writer
    at a time anyway)."""
    if session.get_bind().dialect.name == "postgresql":
        session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": FILE_RULES_LOCK})


def file_rules_revision(session: Session) -> str:
    """A short fingerprint of every file rule (id, version, content, file): it changes with
    every sync or push that changes a file rule, and with nothing else."""
    digest = hashlib.sha256()
    rows = session.execute(
        select(RuleRow.id, RuleRow.version, RuleRow.content_hash, RuleRow.source_file)
        .where(RuleRow.source == FILE)
        .order_by(RuleRow.id)
    )
    for rule_id, version, content, source_file in rows:
        digest.update(f"{rule_id}\0{version}\0{content}\0{source_file}\n".encode())
    return digest.hexdigest()[:16]


def known_files(session: Session) -> dict[str, list[KnownRule]]:
    """What the database holds of each rules file, for `load_rules_dir` to skip the files
    whose bytes did not change (read without locks: `sync_file_rules` compares again)."""
    known: dict[str, list[KnownRule]] = {}
    rows = session.execute(
        select(RuleRow.source_file, RuleRow.id, RuleRow.content_hash, RuleRow.file_digest).where(
            RuleRow.source == FILE
        )
    )
    for source_file, rule_id, content_hash, digest in rows:
        if source_file is not None:
            known.setdefault(source_file, []).append(KnownRule(rule_id, content_hash, digest))
    return known


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
    per `BATCH` rows (an unchanged directory writes nothing).
    """
    report = SyncReport()
    lock_file_rules(session)
    now = utcnow()
    # On PostgreSQL a new rule's first history entry is copied from its row by the server
    # (`_CREATED_FROM_ROWS`), not sent a second time.
    copies_history = session.get_bind().dialect.name == "postgresql"
    existing = {row.id: row for row in session.execute(_SYNC_STATE.with_for_update())}
    trusted = trusted_hashes(session, {item.file_hash for item in loaded if item.file_hash})
    later = next_versions(
        session, [item.rule_id for item in loaded if item.rule_id not in existing]
    )
    inserts: list[dict[str, object]] = []
    updates: list[dict[str, object]] = []
    bookkeeping: list[dict[str, object]] = []
    versions: list[dict[str, object]] = []
    documents: dict[str, JsonObject] = {}  # of the rules written, for their index rows
    for item in loaded:
        rule_id = item.rule_id
        row = existing.get(rule_id)
        trust = TRUSTED if item.file_hash is None or item.file_hash in trusted else UNTRUSTED
        changed = row is None or (row.content_hash, row.source_file) != (
            item.content_hash,
            item.source_file,
        )
        if row is not None and (row.source_hash, row.trust_state, row.file_digest) != (
            item.file_hash,
            trust,
            item.file_digest,
        ):
            # An edited shared file: its trust is revoked; or the file's digest is new (written
            # with the update if any).
            bookkeeping.append(
                {
                    "b_id": rule_id,
                    "source_hash": item.file_hash,
                    "trust": trust,
                    "file_digest": item.file_digest,
                }
            )
        if not changed:
            report.unchanged.append(rule_id)
            continue
        document, enabled = item.stored()
        documents[rule_id] = document
        state = {
            "source": FILE,
            "source_file": item.source_file,
            "content_hash": item.content_hash,
            "enabled": enabled,
            "document": document,
            "updated_at": now,
        }
        if item.document_json is not None:  # COPY writes the text the worker made, as is
            copied = state | {"document": JsonText(item.document_json)}
        else:
            copied = state
        if row is None:
            version = later.get(rule_id, 1)
            inserts.append(
                copied
                | {
                    "id": rule_id,
                    "version": version,
                    "trust_state": trust,
                    "source_hash": item.file_hash,
                    "file_digest": item.file_digest,
                    "created_at": now,
                }
            )
            report.added.append(rule_id)
        else:
            version = row.version + 1
            updates.append(state | {"b_id": rule_id, "version": version})
            report.updated.append(rule_id)
        if row is not None or not copies_history:
            versions.append(
                version_values(rule_id, version, CREATED if row is None else UPDATED, copied, by)
            )
    if bookkeeping:
        statement = (
            _RULES.update()
            .where(_RULES.c.id == bindparam("b_id"))
            .values(
                source_hash=bindparam("source_hash"),
                trust_state=bindparam("trust"),
                file_digest=bindparam("file_digest"),
            )
        )
        for batch in in_batches(bookkeeping):
            session.execute(statement, batch)
    if updates:
        columns = ("source", "source_file", "content_hash", "enabled", "document", "updated_at")
        statement = (
            _RULES.update()
            .where(_RULES.c.id == bindparam("b_id"))
            .values(version=bindparam("version"), **{name: bindparam(name) for name in columns})
        )
        for batch in in_batches(updates):
            session.execute(statement, batch)
        index_rules(session, {rule_id: documents[rule_id] for rule_id in report.updated})
    if remove_missing:
        present = {item.rule_id for item in loaded}
        gone = [rid for rid, row in existing.items() if row.source == FILE and rid not in present]
        versions.extend(_deletions(session, {rid: existing[rid].version for rid in gone}, by))
        for batch in in_batches(gone):
            session.execute(_RULES.delete().where(_RULES.c.id.in_(batch)))
        report.removed.extend(gone)
    insert_rows(session, _RULES, inserts)
    index_rules(session, {rule_id: documents[rule_id] for rule_id in report.added}, new=True)
    if copies_history and inserts:
        ids = [row["id"] for row in inserts]
        session.execute(_CREATED_FROM_ROWS, {"ids": BinaryArray(ids), "change": CREATED, "by": by})
    insert_rows(session, _VERSIONS, versions)
    return report


#: The `created` history entries of rules just inserted, from their rows: the same values
#: `version_values` gives, without sending and parsing each document a second time (a first
#: sync of 100,000 rules: the history's COPY cost about 2 s, this statement about 0.5 s).
_CREATED_FROM_ROWS = text(
    "INSERT INTO rule_versions (rule_id, version, change, source, source_file, content_hash, "
    "document, changed_by, changed_at) SELECT id, version, :change, source, source_file, "
    "content_hash, document, :by, updated_at FROM rules WHERE id = ANY(CAST(:ids AS text[]))"
)


def _deletions(session: Session, current: dict[str, int], by: str) -> list[JsonObject]:
    """The `deleted` history rows of rules about to be removed (rule id -> current version),
    as `ade_tasks.db.rule_edits.delete_rule` writes one."""
    rows: list[JsonObject] = []
    now = utcnow()
    versions = deletion_versions(session, current)
    for batch in in_batches(list(current)):
        for row in session.execute(
            select(RuleRow.id, RuleRow.source, RuleRow.source_file, RuleRow.content_hash)
            .add_columns(RuleRow.document)
            .where(RuleRow.id.in_(batch))
        ):
            state = {
                "source": row.source,
                "source_file": row.source_file,
                "content_hash": row.content_hash,
                "document": row.document,
                "updated_at": now,
            }
            rows.append(version_values(row.id, versions[row.id], DELETED, state, by))
    return rows
