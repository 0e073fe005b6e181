"""What validation knows before a rule runs: a cron that never fires and numbers
outside their documented range are refused with the file, the field and the reason, while a
document stored before those checks existed still reads back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ade_tasks.rules.loader import load_rules_dir, parse_rule
from ade_tasks.rules.rule import Rule
from tests.conftest import write_rule

GOOD = """
    id: good
    triggers: [{type: manual}]
    execution:
      kind: built-in
      actions: [{type: run-command, command: "true"}]
"""


def document(**changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "id": "r",
        "triggers": [{"type": "manual"}],
        "execution": {"kind": "built-in", "actions": [{"type": "run-command", "command": "true"}]},
    }
    doc.update(changes)
    return doc


def problems_of(doc: dict[str, Any]) -> list[str]:
    parsed = parse_rule(doc, "r.yaml")
    assert not isinstance(parsed, Rule), "the document was accepted"
    return [str(p) for p in parsed]


# --- a cron that never fires ---------------------------------------------------------------


@pytest.mark.parametrize("cron", ["0 0 30 2 *", "0 0 31 4 *", "0 12 31 2,4,6 *"])
def test_a_cron_that_never_fires_is_refused_naming_the_field(cron: str) -> None:
    (problem,) = problems_of(document(triggers=[{"type": "schedule", "cron": cron}]))
    assert problem.startswith("r.yaml:triggers.0.cron: ")
    assert "never fires" in problem and repr(cron) in problem


@pytest.mark.parametrize("cron", ["0 0 29 2 *", "0 0 30 2 1", "@yearly", "*/5 * * * *"])
def test_rare_but_possible_crons_are_accepted(cron: str) -> None:
    assert isinstance(
        parse_rule(document(triggers=[{"type": "schedule", "cron": cron}]), "r"), Rule
    )


def test_an_impossible_cron_in_a_shared_file_is_refused_too(tmp_path: Path) -> None:
    write_rule(
        tmp_path / "shared",
        "other-team.yaml",
        GOOD.replace("manual", "schedule, cron: '0 0 30 2 *'"),
    )
    write_rule(tmp_path, "mine.yaml", GOOD.replace("id: good", "id: mine"))
    result = load_rules_dir(tmp_path)
    assert [r.rule.id for r in result.rules] == ["mine"]
    (problem,) = result.problems
    assert problem.file.endswith("shared/other-team.yaml") and problem.field == "triggers.0.cron"


def test_a_stored_document_with_an_impossible_cron_still_reads_back() -> None:
    """Stored before this check existed: reading it must not fail (the scheduler reports it)."""
    stored = document(triggers=[{"type": "schedule", "cron": "0 0 30 2 *"}, {"type": "manual"}])
    rule = Rule.model_validate(stored)
    assert rule.triggers[0].cron == "0 0 30 2 *"  # type: ignore[union-attr]


# --- numbers outside their documented range ------------------------------------------------


def _action(**fields: Any) -> dict[str, Any]:
    return {"kind": "built-in", "actions": [{"type": "run-command", "command": "true", **fields}]}


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"execution": _action(timeout_sec=1e300)}, "execution.actions.0.timeout_sec"),
        ({"execution": _action(timeout_sec=10**400)}, "execution.actions.0.timeout_sec"),
        (
            {"execution": _action(timeout_sec="99999999999999999999d")},
            "execution.actions.0.timeout_sec",
        ),
        ({"execution": _action(timeout_sec=float("inf"))}, "execution.actions.0.timeout_sec"),
        ({"execution": _action(timeout_sec=float("nan"))}, "execution.actions.0.timeout_sec"),
        (
            {"triggers": [{"type": "schedule", "cron": "@daily", "catchup_window": 1e300}]},
            "triggers.0.catchup_window",
        ),
        ({"guardrails": {"max_concurrent": 10**30}}, "guardrails.max_concurrent"),
        (
            {"guardrails": {"budget": {"tokens_per_day": 10**30}}},
            "guardrails.budget.tokens_per_day",
        ),
        (
            {"guardrails": {"budget": {"cost_per_day_usd": float("inf")}}},
            "guardrails.budget.cost_per_day_usd",
        ),
        (
            {"guardrails": {"budget": {"run_seconds_per_day": 10**20}}},
            "guardrails.budget.run_seconds_per_day",
        ),
        ({"inputs": {"n": {"type": "number", "default": float("inf")}}}, "inputs.n.default"),
    ],
)
def test_numbers_out_of_range_are_refused_naming_the_field(
    changes: dict[str, Any], field: str
) -> None:
    problems = problems_of(document(**changes))
    assert any(p.startswith(f"r.yaml:{field}") for p in problems), problems


def test_a_step_timeout_within_a_year_is_still_clamped_to_twelve_hours() -> None:
    rule = parse_rule(document(execution=_action(timeout_sec="2d")), "r")
    assert isinstance(rule, Rule)
    assert rule.execution.actions[0].timeout_sec == 43200.0  # type: ignore[union-attr]


def test_a_stored_document_above_a_newer_count_bound_still_reads_back() -> None:
    rule = Rule.model_validate(document(guardrails={"max_concurrent": 50_000}))
    assert rule.guardrails.max_concurrent == 50_000
