"""Every YAML example of the docs checked as what it is.

Each fenced `yaml` block is recognized by its shape and checked as what it is: a rule or a
list of rules (the rule loader, as `rules validate` runs it), a part of a rule (steps, `triggers:`,
`guardrails:`, `outputs:`, ...: validated inside a minimal rule), step conditions (the condition
parser), or a file of another tool (Compose, Kubernetes, Prometheus rules, a GitHub Actions
workflow, MkDocs: it must parse and have that tool's top-level shape). A block that is none of
these fails, naming where, so a new kind of example gets its check added here.
"""

from __future__ import annotations

from typing import Any

import yaml

from ade_api.dev_model import ScriptError, parse_script
from ade_tasks.rules.conditions import ConditionError, parse_condition
from ade_tasks.rules.loader import parse_rule
from ade_tasks.rules.rule import Rule
from ade_tasks.rules.steps import ACTION_MODELS
from tests.unit.docs.doc_pages import Block, doc_files, read_markdown


class UniqueKeyLoader(yaml.SafeLoader):
    """A YAML loader that refuses a key given twice (the reader sees both, the loader keeps one)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"the key {key!r} is given twice", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


RULE_FIELDS = {alias or name for name, f in Rule.model_fields.items() for alias in (f.alias, None)}
MANUAL_RULE: dict[str, Any] = {
    "id": "example",
    "triggers": [{"type": "manual"}],
    "execution": {"kind": "built-in", "actions": [{"id": "example", "type": "run-command",
                                                   "command": "true"}]},
}  # fmt: skip
#: Files of other tools that the docs show, recognized by their top-level keys.
OTHER_TOOLS = {
    "Docker Compose": lambda d: isinstance(d.get("services"), dict),
    "Kubernetes": lambda d: {"apiVersion", "kind"} <= d.keys(),
    "Prometheus rules": lambda d: isinstance(d.get("groups"), list),
    "Prometheus configuration": lambda d: isinstance(d.get("scrape_configs"), list),
    "GitHub Actions workflow": lambda d: "jobs" in d and ("on" in d or True in d),
    "MkDocs": lambda d: "site_name" in d,
}


def is_step(item: Any) -> bool:
    return isinstance(item, dict) and item.get("type") in ACTION_MODELS and "triggers" not in item


def yaml_problems(document: Any, where: str) -> list[str]:
    """What is wrong with one YAML document of the docs, as `file:line...: reason` lines."""

    def rule(candidate: Any) -> list[str]:
        parsed = parse_rule(candidate, where)
        return [] if isinstance(parsed, Rule) else [str(problem) for problem in parsed]

    if (
        isinstance(document, list)
        and document
        and all(isinstance(item, dict) and "triggers" in item for item in document)
    ):
        return [p for item in document for p in rule(item)]
    if isinstance(document, list) and document and all(map(is_step, document)):
        return rule({**MANUAL_RULE, "execution": {"kind": "built-in", "actions": document}})
    if is_step(document):
        return rule({**MANUAL_RULE, "execution": {"kind": "built-in", "actions": [document]}})
    conditions = document if isinstance(document, list) else [document]
    if conditions and all(isinstance(c, dict) and c.keys() == {"condition"} for c in conditions):
        problems = []
        for item in conditions:
            try:
                parse_condition(str(item["condition"]), where)
            except ConditionError as exc:
                problems.append(str(exc))  # it names `where`
        return problems
    if isinstance(document, dict) and "id" in document and document.keys() <= RULE_FIELDS:
        return rule(document)
    if isinstance(document, dict) and document and document.keys() <= RULE_FIELDS:
        return rule({**MANUAL_RULE, **document})  # a part of a rule: `triggers:`, `guardrails:`
    if isinstance(document, dict) and document.keys() == {"turns"}:  # a `dev-model --script`
        try:
            parse_script(yaml.safe_dump(document), where)
        except ScriptError as exc:
            return [str(exc)]
        return []
    if isinstance(document, dict) and any(shape(document) for shape in OTHER_TOOLS.values()):
        return []
    shown = sorted(map(str, document)) if isinstance(document, dict) else type(document).__name__
    return [
        f"{where}: a YAML block that is no rule, part of a rule, list of steps, condition or "
        f"known file ({', '.join(OTHER_TOOLS)}); it holds {shown}. Make it one of those, or teach "
        "yaml_problems in tests/unit/docs/yaml_examples.py its kind and how to check it"
    ]


def yaml_block_problems(block: Block) -> list[str]:
    where = f"{block.file}:{block.line}"
    try:
        documents = list(yaml.load_all(block.text, Loader=UniqueKeyLoader))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = block.line + mark.line if mark is not None else block.line
        return [f"{block.file}:{line}: malformed YAML: {getattr(exc, 'problem', None) or exc}"]
    if not any(d is not None for d in documents):
        return [f"{where}: the YAML block holds nothing; write the example or drop the block"]
    return [p for d in documents if d is not None for p in yaml_problems(d, where)]


def yaml_blocks() -> list[Block]:
    return [b for p in doc_files() for b in read_markdown(p)[0] if b.lang in ("yaml", "yml")]
