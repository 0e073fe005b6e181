"""Query functions for rules."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select, text
from sqlalchemy.orm import Session

from ade_tasks.db.schema import RuleRow, utcnow
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


_SNAPSHOT = text(
    "SELECT version, enabled, content_hash, document FROM rules WHERE id = :id"
).columns(document=RuleRow.__table__.c.document.type)


def rule_snapshot(session: Session, rule_id: str) -> RuleSnapshot:
    """Read one rule for dispatch or execution (one prepared SELECT; the parse is cached)."""
    row = session.execute(_SNAPSHOT, {"id": rule_id}).first()
    if row is None:
        raise rule_not_found(rule_id)
    rule = parse_document(row.content_hash, row.document)
    return RuleSnapshot(rule_id, row.version, bool(row.enabled), rule)


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
    for item in loaded:
        document = item.rule.document()
        row = existing.get(item.rule.id)
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
                    trust_state="trusted",
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
