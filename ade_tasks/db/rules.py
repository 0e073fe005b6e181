"""Query functions for rules."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import bindparam, select, text
from sqlalchemy.orm import Session

from ade_tasks.db.schema import RuleRow, TrustedHashRow, utcnow
from ade_tasks.errors import NotFoundError
from ade_tasks.rules.loader import LoadedRule
from ade_tasks.rules.models import Rule


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


def trusted_hashes(session: Session, hashes: set[str]) -> set[str]:
    """Which of these shared-file hashes an admin has trusted."""
    if not hashes:
        return set()
    rows = session.scalars(
        select(TrustedHashRow.content_hash).where(TrustedHashRow.content_hash.in_(hashes))
    )
    return set(rows)


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


def sync_file_rules(
    session: Session, loaded: Sequence[LoadedRule], *, remove_missing: bool
) -> SyncReport:
    """Make the file-sourced rules in the database match `loaded`.

    A rule whose document changed gets a new version. File rules no longer present are deleted
    only when `remove_missing` is set: the caller passes False when any file failed to load, so a
    rule whose file is temporarily broken is kept rather than silently dropped.
    """
    report = SyncReport()
    now = utcnow()
    existing = {row.id: row for row in session.scalars(select(RuleRow).with_for_update())}
    trusted = trusted_hashes(session, {item.file_hash for item in loaded if item.file_hash})
    for item in loaded:
        document = item.rule.document()
        row = existing.get(item.rule.id)
        trust = TRUSTED if item.file_hash is None or item.file_hash in trusted else UNTRUSTED
        if row is not None and (row.source_hash, row.trust_state) != (item.file_hash, trust):
            row.source_hash, row.trust_state = item.file_hash, trust  # edited shared file: revoked
        if row is None:
            session.add(
                RuleRow(
                    id=item.rule.id,
                    version=1,
                    source="file",
                    source_file=item.source_file,
                    content_hash=item.content_hash,
                    enabled=item.rule.enabled,
                    document=document,
                    trust_state=trust,
                    source_hash=item.file_hash,
                    created_at=now,
                    updated_at=now,
                )
            )
            report.added.append(item.rule.id)
        elif row.content_hash != item.content_hash or row.source_file != item.source_file:
            row.version += 1
            row.source = "file"
            row.source_file = item.source_file
            row.content_hash = item.content_hash
            row.enabled = item.rule.enabled
            row.document = document
            row.updated_at = now
            report.updated.append(item.rule.id)
        else:
            report.unchanged.append(item.rule.id)
    if remove_missing:
        present = {item.rule.id for item in loaded}
        for rule_id, row in existing.items():
            if row.source == "file" and rule_id not in present:
                session.delete(row)
                report.removed.append(rule_id)
    return report
