"""Push a rules directory: its files (path and text), sent through the API by a token rather
than read from a disk the database's host sees, validated as `rules sync` validates a directory
and applied as one versioned change, or refused whole.

What a push does, where `rules sync` would do otherwise or the issue was silent:

* Every file must be valid: one problem anywhere and nothing is applied (a sync loads the valid
  rules of a directory with broken files); every problem is listed, as `file:field: reason`.
* File rules the pushed directory does not hold are removed (their runs and history are kept),
  as a sync of a directory without problems removes them. Rules created through the API are
  not touched, unless a pushed file defines the same id: then the file's rule replaces it, as a
  sync's would.
* `base` is the revision of the file rules the pusher saw (`file_rules_revision`, what a dry
  run answers). When the file rules changed since (another push or sync applied first), the push
  is refused with a `ConflictError` that says to run it again, rather than undoing the other
  change unseen. Pushes and syncs hold one lock while they compare and write
  (`ade_tasks.db.rule_sync.lock_file_rules`), so of two concurrent pushes from the same base one
  is applied and the other refused.
* A file's name is the path it was pushed under, after the pushed directory's own name as the
  pusher gave it (`config/rules/nightly.yaml`): what `rules sync config/rules` run in the same
  checkout records, so rules move between the two ways without a new version. Files under a
  top-level `shared/` are shared config, as in a rules directory.
"""

from __future__ import annotations

import difflib
import posixpath
from collections.abc import Sequence
from dataclasses import dataclass, field

import yaml
from sqlalchemy import select
from sqlalchemy.orm import Session

from ade_tasks.db.rule_sync import file_rules_revision, lock_file_rules, sync_file_rules
from ade_tasks.db.rules import FILE, in_batches
from ade_tasks.db.schema import RuleRow
from ade_tasks.errors import ConflictError, RuleProblem
from ade_tasks.json_document import JsonObject
from ade_tasks.limits import MAX_RULE_FILE_BYTES
from ade_tasks.rules.file_digests import bytes_key
from ade_tasks.rules.loader import (
    RULE_SUFFIXES,
    SHARED_DIR,
    FileOutcome,
    LoadedRule,
    LoadResult,
    gather,
    parse_rule_file,
)

#: The longest file name a rule row keeps (`rules.source_file`).
MAX_NAME = 1024


@dataclass(frozen=True)
class PushedFile:
    """One file of a pushed directory: its path under the directory (`/`-separated) and text."""

    path: str
    text: str


@dataclass
class PushPlan:
    """What a push changes (or changed): the rule ids per kind of change, and per changed rule
    a unified diff of its document (as YAML) from the stored one to the pushed one. `base` is
    the file rules' revision before, `revision` after (the same as `base` on a dry run)."""

    base: str
    revision: str
    applied: bool
    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    diffs: dict[str, str] = field(default_factory=dict)


def load_pushed(files: Sequence[PushedFile], directory: str = "") -> LoadResult:
    """Validate a pushed directory as `load_rules_dir` validates one on disk: every file's
    rules and every problem (of its name, size, YAML or rules), files in path order."""
    outcomes: list[FileOutcome] = []
    seen: set[str] = set()
    for pushed in sorted(files, key=lambda item: item.path.split("/")):
        name = posixpath.join(directory, pushed.path) if directory else pushed.path
        problem = _name_problem(pushed.path, name, seen)
        raw = pushed.text.encode()
        if problem is None and len(raw) > MAX_RULE_FILE_BYTES:
            problem = (
                f"the file is over {MAX_RULE_FILE_BYTES:,} bytes (1 MiB), the most a rules file "
                "may hold; split it into several files"
            )
        seen.add(pushed.path)
        if problem is not None:
            outcomes.append(([], [RuleProblem(name, "(file)", problem)]))
            continue
        shared = pushed.path.split("/", 1)[0] == SHARED_DIR and "/" in pushed.path
        outcomes.append(parse_rule_file((raw, name, shared, bytes_key(raw))))
    result = gather(outcomes)
    if not files:
        reason = (
            "no rules files were pushed: the directory holds no .yaml or .yml file; push the "
            "directory that holds the rules (a push removes every file rule it does not hold)"
        )
        result.problems.append(RuleProblem(directory or "(directory)", "(directory)", reason))
    return result


def _name_problem(path: str, name: str, seen: set[str]) -> str | None:
    """Why a pushed file's path is refused, if it is."""
    parts = path.split("/")
    if not path or path.startswith("/") or any(part in ("", ".", "..") for part in parts):
        return "the path must be relative to the pushed directory, without `.` or `..` parts"
    if "\\" in path or any(ord(char) < 32 for char in path):
        return "the path may not hold backslashes or control characters; use `/` between folders"
    if posixpath.splitext(path)[1] not in RULE_SUFFIXES:
        return f"not a rules file: only {' and '.join(RULE_SUFFIXES)} files are pushed"
    if len(name) > MAX_NAME:
        return f"the file's name is over {MAX_NAME} characters; use a shorter path"
    if path in seen:
        return "this path is pushed twice; send each file once"
    return None


def push_rules(
    session: Session,
    loaded: Sequence[LoadedRule],
    *,
    base: str | None,
    dry_run: bool,
    by: str,
) -> PushPlan:
    """Compare a pushed directory's valid rules with the file rules stored and, unless
    `dry_run`, make the stored ones match (in the caller's transaction). ConflictError when
    `base` is given and the file rules are no longer at that revision."""
    lock_file_rules(session)
    current = file_rules_revision(session)
    if base is not None and base != current:
        raise ConflictError(
            f"the file rules changed since revision {base} (now {current}): another push or "
            "sync was applied first, and this push would undo what it changed unseen; nothing "
            "was applied. Run `ade-tasks rules push` again to compare with the new state"
        )
    plan = _plan(session, loaded, current)
    if dry_run:
        return plan
    sync_file_rules(session, loaded, remove_missing=True, by=by)
    plan.applied = True
    plan.revision = file_rules_revision(session)
    return plan


def _plan(session: Session, loaded: Sequence[LoadedRule], revision: str) -> PushPlan:
    """What `sync_file_rules` would change, as `PushPlan` (the same comparison: a rule changes
    when its content or its file does)."""
    plan = PushPlan(base=revision, revision=revision, applied=False)
    columns = (RuleRow.id, RuleRow.version, RuleRow.source, RuleRow.source_file)
    query = select(*columns, RuleRow.content_hash).order_by(RuleRow.id)
    stored = {row.id: row for row in session.execute(query)}
    changed: dict[str, LoadedRule] = {}
    for item in loaded:
        row = stored.get(item.rule_id)
        if row is None:
            plan.added.append(item.rule_id)
        elif (row.content_hash, row.source_file) == (item.content_hash, item.source_file):
            plan.unchanged.append(item.rule_id)
        else:
            plan.updated.append(item.rule_id)
            changed[item.rule_id] = item
    present = {item.rule_id for item in loaded}
    plan.removed = [
        rule_id for rule_id, row in stored.items() if row.source == FILE and rule_id not in present
    ]
    # Only the changed rules' documents are read: a push that changes one rule of thousands
    # reads one.
    for batch in in_batches(list(changed)):
        for rule_id, document in session.execute(
            select(RuleRow.id, RuleRow.document).where(RuleRow.id.in_(batch))
        ):
            row, item = stored[rule_id], changed[rule_id]
            was = f"{row.source_file or 'the API'} (v{row.version})"
            plan.diffs[rule_id] = _diff(document, item.stored()[0], was, item.source_file)
    return plan


def _diff(before: JsonObject, after: JsonObject, was: str, now: str) -> str:
    """A unified diff of two rule documents as YAML (the moved file named when only it moved)."""
    lines = difflib.unified_diff(
        _yaml(before), _yaml(after), fromfile=f"{was}", tofile=f"{now} (pushed)"
    )
    text = "".join(lines)
    return text or f"--- {was}\n+++ {now} (pushed)\n(the same rule, from another file)\n"


def _yaml(document: JsonObject) -> list[str]:
    # Keys sorted: the database does not keep a document's key order (PostgreSQL's jsonb).
    return yaml.safe_dump(document, sort_keys=True, allow_unicode=True).splitlines(keepends=True)
