"""Load rule files from a directory: every valid rule, and every problem as `file:field: reason`.

One bad file never blocks the others: each file is parsed and validated on its own (within the
bounds of `ade_tasks.limits`: 1 MiB, 64 levels of nesting, 100,000 YAML nodes), and a rule id
defined twice is refused where it appears the second time (files are read in name order).
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from ade_tasks.errors import RuleProblem
from ade_tasks.limits import MAX_RULE_FILE_BYTES, DocumentLimitError, check_depth, load_yaml
from ade_tasks.rules.base import ADMISSION
from ade_tasks.rules.checks import step_problems
from ade_tasks.rules.messages import problems_of
from ade_tasks.rules.rule import Rule

log = logging.getLogger(__name__)

RULE_SUFFIXES = (".yaml", ".yml")


#: Rule files under this subdirectory of the rules directory are shared config (e.g. another
#: team's rules as a git submodule): their rules run only once an admin trusted the file's hash.
SHARED_DIR = "shared"


@dataclass(frozen=True)
class LoadedRule:
    """A valid rule and where it came from (`file_hash`: the shared file's sha256, else None)."""

    rule: Rule
    source_file: str
    content_hash: str
    file_hash: str | None = None


@dataclass
class LoadResult:
    """What a rules directory holds: the valid rules and the problems of the rest."""

    rules: list[LoadedRule] = field(default_factory=list)
    problems: list[RuleProblem] = field(default_factory=list)
    files: int = 0


def content_hash(document: dict[str, Any]) -> str:
    """A stable hash of a rule document (key order and formatting do not matter)."""
    canonical = json.dumps(document, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def validation_problems(source: str, exc: ValidationError, prefix: str = "") -> list[RuleProblem]:
    """Turn a pydantic error into one problem per wrong field, in the project's words."""
    return [_problem(source, prefix + path, reason) for path, reason in problems_of(exc)]


def parse_rule(document: Any, source: str, prefix: str = "") -> Rule | list[RuleProblem]:
    """Admit one rule document (validated with `ADMISSION`); return the rule or its problems:
    the structural ones and those of its steps' templates, conditions and secrets, all in one
    pass (`rules.checks` reads the raw steps, so a wrong field elsewhere hides nothing)."""
    if not isinstance(document, dict):
        kind = type(document).__name__
        return [RuleProblem(source, prefix or "(document)", f"expected a mapping, got {kind}")]
    try:
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


def load_file(
    path: Path, display: str | None = None, *, shared: bool = False
) -> tuple[list[LoadedRule], list[RuleProblem]]:
    """Parse one YAML file holding a rule or a list of rules (`shared`: shared config)."""
    source = display or str(path)
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_RULE_FILE_BYTES + 1)
        text = raw.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return [], [RuleProblem(source, "(file)", f"cannot read: {exc}")]
    if len(raw) > MAX_RULE_FILE_BYTES:
        reason = (
            f"the file is over {MAX_RULE_FILE_BYTES:,} bytes (1 MiB), the most a rules file may "
            "hold; split it into several files"
        )
        return [], [RuleProblem(source, "(file)", reason)]
    data = parse_yaml(text, source)
    if isinstance(data, RuleProblem):
        return [], [data]
    if data is None:
        return [], [RuleProblem(source, "(document)", "file is empty; write a rule or delete it")]

    documents = data if isinstance(data, list) else [data]
    rules: list[LoadedRule] = []
    problems: list[RuleProblem] = []
    for index, document in enumerate(documents):
        prefix = f"{index}." if isinstance(data, list) else ""
        parsed = parse_rule(document, source, prefix)
        if isinstance(parsed, Rule):
            file_hash = hashlib.sha256(raw).hexdigest() if shared else None
            rules.append(LoadedRule(parsed, source, content_hash(parsed.document()), file_hash))
        else:
            problems.extend(parsed)
    return rules, problems


def load_rules_dir(directory: Path) -> LoadResult:
    """Load every `*.yaml` / `*.yml` file under `directory` (recursively, in name order)."""
    result = LoadResult()
    if not directory.is_dir():
        result.problems.append(
            RuleProblem(
                str(directory), "(directory)", "rules directory does not exist; set ADE_RULES_DIR"
            )
        )
        return result
    files = sorted(p for p in directory.rglob("*") if p.suffix in RULE_SUFFIXES and p.is_file())
    first_seen: dict[str, str] = {}
    for path in files:
        result.files += 1
        shared = path.relative_to(directory).parts[0] == SHARED_DIR
        try:
            rules, problems = load_file(path, shared=shared)
        except Exception as exc:  # a file this version cannot read must not stop the others
            log.exception("rules file %s could not be loaded", path)
            reason = f"could not be loaded ({type(exc).__name__}: {exc}); fix or remove the file"
            rules, problems = [], [RuleProblem(str(path), "(file)", reason)]
        result.problems.extend(problems)
        for loaded in rules:
            earlier = first_seen.get(loaded.rule.id)
            if earlier is not None:
                result.problems.append(
                    RuleProblem(
                        loaded.source_file,
                        "id",
                        f"duplicate rule id {loaded.rule.id!r} (already defined in {earlier}); "
                        "rule ids must be unique",
                    )
                )
                continue
            first_seen[loaded.rule.id] = loaded.source_file
            result.rules.append(loaded)
    return result
