"""Load rule files from a directory: every valid rule, and every problem as `file:field: reason`.

One bad file never blocks the others: each file is parsed and validated on its own (within the
bounds of `ade_tasks.limits`: 1 MiB, 64 levels of nesting, 100,000 YAML nodes), and a rule id
defined twice is refused where it appears the second time (files are read in name order).
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from ade_tasks.errors import ConflictError, RuleProblem
from ade_tasks.json_document import JsonObject
from ade_tasks.limits import MAX_RULE_FILE_BYTES, DocumentLimitError, check_depth, load_yaml
from ade_tasks.rules.checks import step_problems
from ade_tasks.rules.document import ADMISSION
from ade_tasks.rules.file_digests import KnownFiles, bytes_key, file_digest, unchanged
from ade_tasks.rules.file_pool import POOL_FROM, map_in_pool
from ade_tasks.rules.gc_pause import paused_gc
from ade_tasks.rules.messages import problems_of
from ade_tasks.rules.rule import Rule

log = logging.getLogger(__name__)

RULE_SUFFIXES = (".yaml", ".yml")


#: Rule files under this subdirectory of the rules directory are shared config (e.g. another
#: team's rules as a git submodule): their rules run only once an admin trusted the file's hash.
SHARED_DIR = "shared"


@dataclass(frozen=True)
class LoadedRule:
    """A valid rule and where it came from (`file_hash`: the shared file's sha256, else None).

    `document` is the validated rule as stored (None when its file was skipped as unchanged
    since the last sync: the database holds it), `document_json` the same as the canonical JSON
    its content hash was taken of (None when not parsed here), which a sync's COPY writes
    as is instead of serializing the document again; `file_digest` is what its row keeps to skip
    the file next time (`ade_tasks.rules.file_digests`; None: parse it every time). `rule`
    builds the model on first use (from the document, or by parsing the file again).
    """

    rule_id: str
    source_file: str
    content_hash: str
    file_hash: str | None = None
    document: JsonObject | None = None
    enabled: bool = True
    file_digest: str | None = None
    document_json: str | None = field(default=None, compare=False, repr=False)
    parsed: Rule | None = field(default=None, compare=False, repr=False)

    @functools.cached_property
    def rule(self) -> Rule:
        """The rule's model."""
        if self.parsed is not None:
            return self.parsed
        if self.document is not None:
            return Rule.model_validate(self.document)
        rules, problems = load_file(Path(self.source_file))
        for loaded in rules:
            if loaded.rule_id == self.rule_id:
                return loaded.rule
        reason = "; ".join(map(str, problems)) or "it no longer defines the rule"
        raise ConflictError(
            f"rule {self.rule_id!r} cannot be read again from {self.source_file} ({reason}); "
            "sync the rules directory again"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled (from a parsing worker) with its document as the JSON text it has: a
        document unpickled as objects cost the caller about 45 µs a rule, the text and
        `json.loads` about 13 (100,000 rules, 2026-12-03)."""
        text = self.document_json
        return (
            _unpickled,
            (self.rule_id, self.source_file, self.content_hash, self.file_hash,
             self.document if text is None else None, self.enabled, self.file_digest, text,
             self.parsed),
        )  # fmt: skip

    def stored(self) -> tuple[JsonObject, bool]:
        """The document and `enabled` its row stores."""
        if self.document is not None:
            return self.document, self.enabled
        return self.rule.document(), self.rule.enabled


def _unpickled(
    rule_id: str, source_file: str, content_hash: str, file_hash: str | None,
    document: JsonObject | None, enabled: bool, file_digest: str | None,
    document_json: str | None, parsed: Rule | None,
) -> LoadedRule:  # fmt: skip
    if document_json is not None:
        document = json.loads(document_json)
    return LoadedRule(rule_id, source_file, content_hash, file_hash, document, enabled,
                      file_digest, document_json, parsed)  # fmt: skip


@dataclass
class LoadResult:
    """What a rules directory holds: the valid rules and the problems of the rest."""

    rules: list[LoadedRule] = field(default_factory=list)
    problems: list[RuleProblem] = field(default_factory=list)
    files: int = 0


def canonical_json(document: JsonObject) -> str:
    """A rule document as the JSON text its content hash is taken of (keys sorted, compact)."""
    return json.dumps(document, sort_keys=True, separators=(",", ":"))


def content_hash(document: JsonObject, canonical: str | None = None) -> str:
    """A stable hash of a rule document (key order and formatting do not matter);
    `canonical`: its `canonical_json`, when the caller has it already."""
    text = canonical_json(document) if canonical is None else canonical
    return hashlib.sha256(text.encode()).hexdigest()


def validation_problems(source: str, exc: ValidationError, prefix: str = "") -> list[RuleProblem]:
    """Turn a pydantic error into one problem per wrong field, in the project's words."""
    return [_problem(source, prefix + path, reason) for path, reason in problems_of(exc)]


def parse_rule(
    document: Any, source: str, prefix: str = "", *, depth_checked: bool = False
) -> Rule | list[RuleProblem]:
    """Admit one rule document (validated with `ADMISSION`); return the rule or its problems:
    the structural ones and those of its steps' templates, conditions and secrets, all in one
    pass (`rules.checks` reads the raw steps, so a wrong field elsewhere hides nothing).
    `depth_checked`: the document is (part of) one `load_yaml` returned, which bounded its
    depth to the same `MAX_DEPTH` already (a second walk costs ~20 us a rule file)."""
    if not isinstance(document, dict):
        kind = type(document).__name__
        return [RuleProblem(source, prefix or "(document)", f"expected a mapping, got {kind}")]
    try:
        if not depth_checked:
            check_depth(document, what="the rule")
    except DocumentLimitError as exc:
        return [RuleProblem(source, prefix or "(document)", exc.message)]
    problems = [_problem(source, prefix + path, why) for path, why in step_problems(document)]
    try:
        rule = Rule.model_validate(document, context=ADMISSION)
    except ValidationError as exc:
        return validation_problems(source, exc, prefix) + problems
    return problems or rule


def _problem(source: str, path: str, reason: str) -> RuleProblem:
    # One problem, one line: a multi-line condition quoted in a reason keeps it on its line.
    return RuleProblem(source, path, reason.replace("\n", "\\n"))


def parse_yaml(text: str, source: str) -> Any | RuleProblem:
    """The document of a rule file's text, or the problem that stops it being read (malformed,
    nested too deeply, too many nodes, a number too long to convert)."""
    try:
        return load_yaml(text)
    except DocumentLimitError as exc:
        return RuleProblem(source, exc.where or "(document)", exc.message)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "(document)"
        reason = getattr(exc, "problem", None) or str(exc)
        return RuleProblem(source, where, f"malformed YAML: {reason}")
    except ValueError as exc:  # e.g. an integer of more than 4,300 digits
        return RuleProblem(source, "(document)", f"malformed YAML: {exc}")


def read_rule_file(path: str | Path, source: str) -> bytes | RuleProblem:
    """A rules file's bytes, or why it cannot be read (unreadable, over 1 MiB)."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_RULE_FILE_BYTES + 1)
    except OSError as exc:
        return RuleProblem(source, "(file)", f"cannot read: {exc}")
    if len(raw) > MAX_RULE_FILE_BYTES:
        reason = (
            f"the file is over {MAX_RULE_FILE_BYTES:,} bytes (1 MiB), the most a rules file may "
            "hold; split it into several files"
        )
        return RuleProblem(source, "(file)", reason)
    return raw


#: One file to parse: its bytes, the name its problems and rows give it, is it shared config,
#: and its `bytes_key` (computed once, by the process that reads the file). Bytes and key None:
#: the file at that name is read by the process that parses it (a worker, when the caller had
#: no reason to read it first: about 17 µs a file the caller no longer spends or pickles).
FileToParse = tuple[bytes | None, str, bool, bytes | None]
#: What a file yields: its valid rules and the problems of the rest.
FileOutcome = tuple[list[LoadedRule], list[RuleProblem]]


def parse_rule_file(item: FileToParse, *, keep_model: bool = True) -> FileOutcome:
    """Parse one file's bytes, holding a rule or a list of rules; never raises (a file this
    version cannot read is a problem naming it). `keep_model`: keep each `Rule` (a worker
    process returns documents only, which pickle cheaply)."""
    raw, source, shared, key = item
    if raw is None or key is None:
        read = read_rule_file(source, source)
        if isinstance(read, RuleProblem):
            return [], [read]
        raw, key = read, bytes_key(read)
    try:
        rules, problems = _parse(raw, source, shared)
    except Exception as exc:  # a file this version cannot read must not stop the others
        log.exception("rules file %s could not be loaded", source)
        reason = f"could not be loaded ({type(exc).__name__}: {exc}); fix or remove the file"
        return [], [RuleProblem(source, "(file)", reason)]
    # Judged on the models `_parse` made: without them `item.rule` would validate the
    # document a second time (a third of a worker's time a file).
    if problems or any(_admitted_by_date(item.rule) for item in rules):
        digest = None  # parse it again next time
    else:
        digest = file_digest(key, ((item.rule_id, item.content_hash) for item in rules))
    if digest is None and keep_model:
        return rules, problems
    return [
        replace(item, file_digest=digest, parsed=item.parsed if keep_model else None)
        for item in rules
    ], problems


def parse_in_worker(item: FileToParse) -> FileOutcome:
    """`parse_rule_file` for a worker process (documents, no models)."""
    return parse_rule_file(item, keep_model=False)


def _parse(raw: bytes, source: str, shared: bool) -> FileOutcome:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return [], [RuleProblem(source, "(file)", f"cannot read: {exc}")]
    data = parse_yaml(text, source)
    if isinstance(data, RuleProblem):
        return [], [data]
    if data is None:
        return [], [RuleProblem(source, "(document)", "file is empty; write a rule or delete it")]

    documents = data if isinstance(data, list) else [data]
    rules: list[LoadedRule] = []
    problems: list[RuleProblem] = []
    file_hash = hashlib.sha256(raw).hexdigest() if shared else None
    for index, document in enumerate(documents):
        prefix = f"{index}." if isinstance(data, list) else ""
        parsed = parse_rule(document, source, prefix, depth_checked=True)
        if isinstance(parsed, Rule):
            stored = parsed.document()
            canonical = canonical_json(stored)
            rules.append(
                LoadedRule(
                    parsed.id,
                    source,
                    content_hash(stored, canonical),
                    file_hash,
                    stored,
                    parsed.enabled,
                    document_json=canonical,
                    parsed=parsed,
                )
            )
        else:
            problems.extend(parsed)
    return rules, problems


def _admitted_by_date(rule: Rule) -> bool:
    """Does admitting this rule depend on the date (a one-shot that is refused once past)?"""
    return any(
        getattr(trigger, "run_at", None) is not None
        or getattr(trigger, "delay_seconds", None) is not None
        for trigger in rule.triggers
    )


def load_file(
    path: Path, display: str | None = None, *, shared: bool = False
) -> tuple[list[LoadedRule], list[RuleProblem]]:
    """Parse one YAML file holding a rule or a list of rules (`shared`: shared config)."""
    source = display or str(path)
    raw = read_rule_file(path, source)
    if isinstance(raw, RuleProblem):
        return [], [raw]
    return parse_rule_file((raw, source, shared, bytes_key(raw)))


def load_rules_dir(
    directory: Path, known: KnownFiles | None = None, *, pool_from: int = POOL_FROM
) -> LoadResult:
    """Load every `*.yaml` / `*.yml` file under `directory` (recursively, in name order).

    `known`: what the database holds per file (`ade_tasks.db.rule_sync.known_files`); a file
    whose bytes still yield exactly that is not parsed again, its rules come from `known`
    (documents None). The rest are parsed, in worker processes from `pool_from` files on.
    The cyclic collector is paused meanwhile (`ade_tasks.rules.gc_pause`).
    """
    with paused_gc():
        return _load_dir(directory, known, pool_from)


def _load_dir(directory: Path, known: KnownFiles | None, pool_from: int) -> LoadResult:
    result = LoadResult()
    if not directory.is_dir():
        result.problems.append(
            RuleProblem(
                str(directory), "(directory)", "rules directory does not exist; set ADE_RULES_DIR"
            )
        )
        return result
    files = rule_files(directory)
    outcomes: list[FileOutcome | None] = []
    to_parse: list[FileToParse] = []
    for source, shared in files:
        rows = known.get(source, ()) if known is not None else ()
        if not rows:  # nothing to compare its bytes with: whoever parses it reads it
            outcomes.append(None)
            to_parse.append((None, source, shared, None))
            continue
        raw = read_rule_file(source, source)
        if isinstance(raw, RuleProblem):
            outcomes.append(([], [raw]))
            continue
        key = bytes_key(raw)
        if unchanged(rows, key):
            file_hash = hashlib.sha256(raw).hexdigest() if shared else None
            digest = file_digest(key, ((row.rule_id, row.content_hash) for row in rows))
            skipped = [
                LoadedRule(row.rule_id, source, row.content_hash, file_hash, file_digest=digest)
                for row in rows
            ]
            outcomes.append((skipped, []))
        else:
            outcomes.append(None)
            to_parse.append((raw, source, shared, key))
    parsed = iter(_parse_all(to_parse, pool_from))
    return gather(outcome if outcome is not None else next(parsed) for outcome in outcomes)


def gather(outcomes: Iterable[FileOutcome]) -> LoadResult:
    """The files' outcomes (in path order) as one result: a rule id defined twice is refused
    where it appears the second time."""
    result = LoadResult()
    first_seen: dict[str, str] = {}
    for rules, problems in outcomes:
        result.files += 1
        result.problems.extend(problems)
        kept: list[LoadedRule] = []
        for loaded in rules:
            earlier = first_seen.get(loaded.rule_id)
            if earlier is not None:
                result.problems.append(
                    RuleProblem(
                        loaded.source_file,
                        "id",
                        f"duplicate rule id {loaded.rule_id!r} (already defined in {earlier}); "
                        "rule ids must be unique",
                    )
                )
                continue
            first_seen[loaded.rule_id] = loaded.source_file
            kept.append(loaded)
        if len(kept) < len(rules):  # parsed again next time: the other definition may go
            kept = [replace(loaded, file_digest=None) for loaded in kept]
        result.rules.extend(kept)
    return result


def rule_files(directory: Path) -> list[tuple[str, bool]]:
    """Every `*.yaml` / `*.yml` file under `directory` in path order, as (path, is it in the
    top-level `shared/` folder); found as `Path.rglob` finds them (files reached by a symlink
    included, symlinked directories not entered, unreadable directories skipped), by
    `os.scandir`, whose entries know their type without a `stat` each: `rglob`, `is_file` and
    the `Path` objects cost about 20 µs a file (2.1 s of 100,000), this about 5."""
    found: list[tuple[tuple[str, ...], str, bool]] = []  # (parts under directory, path, shared)
    folders: list[tuple[tuple[str, ...], str]] = [((), str(directory))]
    while folders:
        parts, folder = folders.pop()
        try:
            with os.scandir(folder) as scan:
                entries = list(scan)
        except OSError:
            continue
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                folders.append(((*parts, entry.name), entry.path))
            elif os.path.splitext(entry.name)[1] in RULE_SUFFIXES and entry.is_file():
                found.append(((*parts, entry.name), entry.path, parts[:1] == (SHARED_DIR,)))
    found.sort()  # Path order: by parts, without Path's slow comparisons
    return [(path, shared) for _, path, shared in found]


def _parse_all(files: list[FileToParse], pool_from: int) -> list[FileOutcome]:
    if len(files) < pool_from:
        return [parse_rule_file(item) for item in files]
    return map_in_pool(parse_in_worker, files, pool_from=pool_from)
