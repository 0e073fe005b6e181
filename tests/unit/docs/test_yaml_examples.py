"""Docs that cannot drift (issue 37, finding 10): every YAML example in README.md and the pages
under docs/, and every YAML file under config/, is checked against the code that would read it
(`tests.unit.docs.yaml_examples` says how); a page or file added later is checked from its
first day.
"""

from __future__ import annotations

import pytest

from ade_tasks.rules.loader import load_rules_dir
from tests.unit.docs.doc_pages import ROOT, Block
from tests.unit.docs.yaml_examples import yaml_block_problems, yaml_blocks


def test_every_yaml_example_in_the_docs_is_checked_as_what_it_is() -> None:
    blocks = yaml_blocks()
    assert len(blocks) > 40, "the docs' YAML examples are not found"
    problems = [p for block in blocks for p in yaml_block_problems(block)]
    assert not problems, "\n".join(problems)


def test_every_yaml_file_under_config_loads() -> None:
    rules = load_rules_dir(ROOT / "config" / "rules")
    assert rules.rules and not rules.problems, "\n".join(map(str, rules.problems))
    for path in sorted(ROOT.glob("config/**/*.y*ml")):
        if (ROOT / "config" / "rules") in path.parents:
            continue
        text = path.read_text()
        block = Block(str(path.relative_to(ROOT)), 1, "yaml", text)
        assert not yaml_block_problems(block), yaml_block_problems(block)


@pytest.mark.parametrize(
    ("text", "wanted"),
    [
        (
            "id: x\ntriggers: [{type: manual}]\nexecution: {kind: built-in, actions: []}\n",
            "actions",
        ),
        ("triggers:\n  - {type: schedule, cron: '61 * * * *'}\n", "triggers.0"),
        ("- {id: a, type: run-command}\n", "command"),
        ("condition: steps.a.status ==\n", "expected a value"),
        ("guardrails: {max_duration_min: 30}\nguardrails: {}\n", "given twice"),
        ("colour: blue\n", "no rule, part of a rule"),
        ("id: [\n", "malformed YAML"),
    ],
)
def test_the_yaml_checks_can_fail(text: str, wanted: str) -> None:
    problems = yaml_block_problems(Block("docs/x.md", 7, "yaml", text))
    assert problems and wanted in " ".join(problems), problems
    assert all(p.startswith("docs/x.md:") for p in problems), problems
