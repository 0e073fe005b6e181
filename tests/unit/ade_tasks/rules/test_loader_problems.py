"""`rules validate` reports every problem of a file in one pass, one line each, in the project's
own words (no pydantic text), and counts them as it prints them."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from ade_api.cli import main
from ade_tasks.rules.loader import load_rules_dir
from tests.conftest import write_rule

MIXED = """
    id: Bad_Rule
    triggers: {type: manual}
    execution:
      kind: built-in
      actions:
        - id: build
          type: run-command
          command: "make {{steps.nope.output}} {{trigger}}"
          condition: "trigger.ref =="
        - id: lint
          type: run-command
          command: 5
          timeout: 3
        - id: lint
          type: run-tests
          command: "pytest {{rule.bogus}}"
          retry: many
    guardrails: {rate_limit: often, max_duration_min: -1}
    review_profile: sloppy
"""

EXPECTED = [
    "id: 'Bad_Rule' is not valid here; write a slug: lowercase letters, digits",
    "triggers: must be a list, not a mapping; write the items as `- item` lines or in [ ]",
    "execution.actions.1.command: must be a string or a list, not 5",
    "execution.actions.1.timeout: unknown field; remove it or check its spelling",
    "execution.actions.2.retry: must be a whole number, not the string 'many'",
    "guardrails.rate_limit: 'often' is not valid here; write a count per unit, e.g. 10/minute",
    "guardrails.max_duration_min: must be greater than 0, not -1",
    "review_profile: 'sloppy' is not allowed; use one of 'quick', 'incremental', ",
    'execution.actions.0.condition: expected a value at column 15 in "trigger.ref =="',
    "execution.actions.0.command: unknown variable steps.nope.output; step 'nope' is not an "
    "earlier step",
    "execution.actions.0.command: unknown variable trigger; name a trigger field",
    "execution.actions.2.id: step id 'lint' is taken by an earlier step; give each step its own id",
    "execution.actions.2.command: unknown variable rule.bogus; rule fields: id, name, ",
]
# What pydantic says in its own words; none of it may reach a rule author.
PYDANTIC_WORDS = ("Input should", "String should", "Field required", "List should", "Value error")


def test_structural_template_and_condition_problems_come_in_one_pass(tmp_path: Path) -> None:
    # Given a file with wrong fields, a wrong type, a duplicate step id, bad templates and a
    # malformed condition
    write_rule(tmp_path, "bad.yaml", MIXED)

    # When it is validated
    result = CliRunner().invoke(main, ["rules", "validate", str(tmp_path)])

    # Then every problem is one line naming the file and the field, and the count matches
    lines = [line for line in result.output.splitlines() if line.startswith(str(tmp_path))]
    prefix = f"{tmp_path / 'bad.yaml'}:"
    assert len(lines) == len(EXPECTED), "\n".join(lines)
    for line, expected in zip(sorted(lines), sorted(EXPECTED), strict=True):
        assert line.startswith(prefix + expected), line
    assert f"0 valid rules in 1 file, {len(EXPECTED)} problems" in result.output
    assert result.exit_code == 1
    assert not [line for line in lines if any(word in line for word in PYDANTIC_WORDS)]


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ("triggers: []", "triggers: must hold at least 1 item, not 0"),
        ("enabled: maybe", "enabled: must be true or false, not the string 'maybe'"),
        ("queue: 'a queue'", "queue: 'a queue' is not valid here; use letters, digits, "),
        (
            "triggers: [{type: schedule}]",
            "triggers.0: a schedule trigger needs exactly one of cron, run_at or delay_seconds",
        ),
        ("triggers: [manual]", "triggers.0: must be a mapping (field: value), not the string"),
        ("execution: {kind: nope}", "execution: kind 'nope' is not known; use one of "),
        ("execution: {actions: []}", "execution: has no kind; add `kind:` saying which kind"),
        (
            "execution: {kind: built-in, actions: [{command: ls}]}",
            "execution.actions.0: the step has no type; add `type:` with one of: run-command, ",
        ),
        (
            "execution: {kind: built-in, actions: [{type: run-command, command: [ls, 1]}]}",
            "execution.actions.0.command.1: must be a string, not 1",
        ),
        (
            "inputs: {who: {default: [1]}}",
            "inputs.who.default: must be a string, true or false, or a number, not a list",
        ),
        (  # issue 37, finding 8: a default the run would refuse is refused at validation
            "inputs: {count: {type: number, default: two}}",
            "inputs.count: default 'two' is not a number: write one, e.g. 2 or 0.5",
        ),
        (
            "inputs: {env: {type: choice, options: [staging, prod], default: dev}}",
            "inputs.env: default 'dev' is not one of the options (staging, prod): name one",
        ),
        (
            "inputs: {dry: {type: boolean, default: maybe}}",
            "inputs.dry: default 'maybe' is not a boolean: write true or false",
        ),
        (
            "execution: {kind: agent-session, provider: openai, model: m, prompt: ''}",
            "execution.prompt: must not be empty",
        ),
    ],
)
def test_each_kind_of_structural_problem_reads_in_the_projects_words(
    tmp_path: Path, change: str, problem: str
) -> None:
    key = change.split(":")[0]
    base = {
        "id": "id: r",
        "triggers": "triggers: [{type: manual}]",
        "execution": "execution: {kind: built-in, actions: [{type: run-command, command: ls}]}",
    }
    base[key] = change
    write_rule(tmp_path, "r.yaml", "\n".join(base.values()) + "\n")

    (found,) = load_rules_dir(tmp_path).problems

    assert f"{found.field}: {found.reason}".startswith(problem), str(found)
    assert not any(word in found.reason for word in PYDANTIC_WORDS)
