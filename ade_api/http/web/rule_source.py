"""A rule's source on the web page: its document as YAML, every version it had
(`rule_versions`: who changed it, when, from which file or the API) and one older version's
source beside what changed since.

The database keeps a rule as its validated document, not the file's text (no comments, and no
key order: PostgreSQL's JSONB and the content hash's sorted JSON drop it), so the source shown
is that document written back as YAML: without the fields left at their defaults (as a rule
file would leave them out; a document this version can no longer read is shown whole), in a
fixed order: the rule's fields as `Rule` declares them (its inputs after its triggers), `id`,
`name`, `type` and `kind` first in every nested mapping, the rest alphabetical, the inputs in
their declared order (their stored `position` left out).
"""

from __future__ import annotations

import difflib

import yaml
from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse
from sqlalchemy import select
from sqlalchemy.orm import Session

from ade_api.http.web.pages import error_page, read, render
from ade_tasks.db import rule_versions as rule_versions_db
from ade_tasks.db import rules as rules_db
from ade_tasks.db.schema import RuleRow, RuleVersionRow
from ade_tasks.errors import AdeError, NotFoundError
from ade_tasks.json_document import JsonObject
from ade_tasks.rules.rule import Rule

router = APIRouter(prefix="/ui", include_in_schema=False)

#: Versions the rule's page lists (newest first); older ones are in the API's history.
VERSIONS = 20
_FIRST = ("id", "name", "type", "kind")


def _ordered(value: object) -> object:
    """Mappings with `_FIRST` keys first, then alphabetical, all the way down."""
    if isinstance(value, dict):
        keys = sorted(value, key=lambda k: (_FIRST.index(k) if k in _FIRST else len(_FIRST), k))
        return {key: _ordered(value[key]) for key in keys}
    if isinstance(value, list):
        return [_ordered(item) for item in value]
    return value


def _inputs_in_order(inputs: object) -> object:
    """The inputs by their stored `position` (as declared), without it."""
    if not isinstance(inputs, dict):
        return inputs
    specs = [(n, s) for n, s in inputs.items() if isinstance(s, dict)]
    if len(specs) != len(inputs):
        return _ordered(inputs)
    specs.sort(key=lambda item: (item[1].get("position", len(inputs)), item[0]))
    return {n: _ordered({k: v for k, v in s.items() if k != "position"}) for n, s in specs}


def _written(content_hash: str, document: JsonObject) -> JsonObject:
    """The document without the fields its rule leaves at their defaults."""
    try:
        rule = rules_db.parse_document(content_hash, document)
    except Exception:  # an old version this release cannot read: show all of it
        return document
    written: JsonObject = rule.model_dump(mode="json", exclude_defaults=True)
    return written


def source_text(content_hash: str, document: JsonObject) -> str:
    """A stored rule document as the YAML a person would write."""
    document = _written(content_hash, document)
    fields = list(Rule.model_fields)
    fields.insert(fields.index("triggers") + 1, fields.pop(fields.index("inputs")))
    keys = sorted(document, key=lambda k: (fields.index(k) if k in fields else len(fields), k))
    ordered = {
        key: _inputs_in_order(document[key]) if key == "inputs" else _ordered(document[key])
        for key in keys
    }
    return yaml.safe_dump(ordered, sort_keys=False, allow_unicode=True, width=100)


def changes(older: str, newer: str, older_name: str, newer_name: str) -> str:
    """What changed between two sources, as a unified diff ("" when nothing did)."""
    lines = difflib.unified_diff(
        older.splitlines(keepends=True), newer.splitlines(keepends=True), older_name, newer_name
    )
    return "".join(lines)


def rule_versions(session: Session, rule_id: str) -> list[RuleVersionRow]:
    """The newest `VERSIONS` versions of the rule, newest first."""
    rows, _ = rule_versions_db.list_versions(session, rule_id, limit=VERSIONS)
    return list(rows)


@router.get("/rules/{rule_id}/versions/{version}")
def version_page(request: Request, rule_id: str, version: int) -> HTMLResponse:
    """One version of a rule: who made it, when and how, its source, and what changed from it
    to the rule as it is now (also of a deleted rule, whose history outlives it)."""

    def load(session: Session) -> tuple[RuleVersionRow, RuleRow | None]:
        row = session.scalar(
            select(RuleVersionRow).where(
                RuleVersionRow.rule_id == rule_id, RuleVersionRow.version == version
            )
        )
        if row is None:
            raise NotFoundError(
                f"rule {rule_id!r} has no version {version}; its page lists the versions it had"
            )
        return row, session.get(RuleRow, rule_id)

    try:
        found, current = read(request, load)
    except AdeError as exc:
        return error_page(request, exc)
    source = source_text(found.content_hash, found.document)
    diff = ""
    if current is not None and current.version != found.version:
        now = source_text(current.content_hash, current.document)
        diff = changes(source, now, f"version {found.version}", f"version {current.version} (now)")
    return render(
        request, "rule_version.html", f"Rule {rule_id}, version {found.version}",
        entry=found, source=source, current=current, diff=diff,
    )  # fmt: skip
