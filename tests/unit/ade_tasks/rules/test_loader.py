"""Rule documents and rule files: every problem as `file:field: reason`, bad files never block good ones."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from ade_api.cli import main
from ade_tasks.rules.loader import load_file, load_rules_dir, parse_rule
from ade_tasks.rules.rule import Rule
from tests.conftest import REPO, write_rule
from tests.tracked import copy_tracked

GOOD = """
    id: good
    triggers: [{type: manual}]
    execution:
      kind: built-in
      actions: [{type: run-command, command: "true"}]
"""


def reasons(directory: Path) -> list[str]:
    return [str(p) for p in load_rules_dir(directory).problems]


def test_shipped_example_rules_are_valid(tmp_path: Path) -> None:
    result = load_rules_dir(copy_tracked(REPO / "config" / "rules", tmp_path))
    assert result.problems == []
    ids = {loaded.rule.id for loaded in result.rules}
    assert {"hello", "run-tests", "nightly-disk-report", "pr-review"} <= ids
    pr_review = next(r.rule for r in result.rules if r.rule.id == "pr-review")
    assert pr_review.enabled is False and pr_review.execution.kind == "agent-session"


def test_malformed_yaml_is_refused_with_its_line_and_others_still_load(tmp_path: Path) -> None:
    write_rule(tmp_path, "a-good.yaml", GOOD)
    write_rule(tmp_path, "b-bad.yaml", "id: bad\ntriggers: [\n  - type: manual\n")
    result = load_rules_dir(tmp_path)
    assert [r.rule.id for r in result.rules] == ["good"]
    (problem,) = result.problems
    assert problem.file.endswith("b-bad.yaml")
    assert problem.field.startswith("line ")
    assert "malformed YAML" in problem.reason


def test_unknown_trigger_type_names_the_trigger(tmp_path: Path) -> None:
    write_rule(tmp_path, "r.yaml", GOOD.replace("{type: manual}", "{type: github.pr_exploded}"))
    (problem,) = reasons(tmp_path)
    assert "r.yaml:triggers.0: unknown trigger type 'github.pr_exploded' (known: " in problem
    assert "github.pr_opened" in problem


@pytest.mark.parametrize(
    ("cron", "reason"),
    [
        ("61 * * * *", "minute field '61': 61 is out of range; write a value in 0-59"),
        ("* * * *", "has 4 field(s); write 5: minute hour day-of-month month day-of-week"),
        ("0 0 * * * *", "has 6 field(s); write 5"),
        ("@fortnightly", "unknown macro; write one of @yearly"),
    ],
)
def test_bad_cron_is_refused(tmp_path: Path, cron: str, reason: str) -> None:
    write_rule(
        tmp_path, "r.yaml", GOOD.replace("{type: manual}", f'{{type: schedule, cron: "{cron}"}}')
    )
    (problem,) = reasons(tmp_path)
    assert ":triggers.0.cron: " in problem and reason in problem


def test_cron_aliases_sunday_as_seven_and_time_zones_are_accepted() -> None:
    for cron in ("@hourly", "0 3 * * 7", "0 3 * * 0", "*/5 * * * 1-5"):
        rule = Rule.model_validate(
            {
                **parse_good(),
                "triggers": [{"type": "schedule", "cron": cron, "timezone": "America/New_York"}],
            }
        )
        assert rule.triggers[0].type == "schedule"


def parse_good() -> dict[str, object]:
    return dict(yaml.safe_load(textwrap.dedent(GOOD)))


def test_unknown_time_zone_and_oversized_catchup_window_are_refused(tmp_path: Path) -> None:
    write_rule(
        tmp_path,
        "r.yaml",
        GOOD.replace(
            "{type: manual}",
            '{type: schedule, cron: "0 * * * *", timezone: Mars/Olympus, catchup_window: 40d}',
        ),
    )
    problems = reasons(tmp_path)
    assert any(":triggers.0.timezone: unknown time zone 'Mars/Olympus'" in p for p in problems)
    assert any(
        ":triggers.0.catchup_window: catchup_window must be between 0 and 35 days" in p
        for p in problems
    )


def test_unknown_field_is_refused_with_its_path(tmp_path: Path) -> None:
    write_rule(tmp_path, "r.yaml", GOOD + "    guardrails: {max_duraton_min: 5}\n")
    (problem,) = reasons(tmp_path)
    assert problem.endswith(
        "r.yaml:guardrails.max_duraton_min: unknown field; remove it or check its spelling"
    )


def test_duplicate_rule_id_is_refused_where_it_appears_second(tmp_path: Path) -> None:
    write_rule(tmp_path, "a.yaml", GOOD)
    write_rule(tmp_path, "b.yaml", GOOD)
    write_rule(tmp_path, "c.yaml", GOOD.replace("id: good", "id: other"))
    result = load_rules_dir(tmp_path)
    assert sorted(r.rule.id for r in result.rules) == ["good", "other"]
    (problem,) = result.problems
    assert problem.file.endswith("b.yaml") and problem.field == "id"
    assert "duplicate rule id 'good' (already defined in" in problem.reason


def test_unknown_action_type_and_empty_command_are_refused(tmp_path: Path) -> None:
    write_rule(tmp_path, "a.yaml", GOOD.replace("type: run-command", "type: launch-rocket"))
    write_rule(
        tmp_path,
        "b.yaml",
        GOOD.replace('command: "true"', 'command: "  "').replace("id: good", "id: b"),
    )
    problems = reasons(tmp_path)
    assert any(
        "a.yaml:execution.actions.0: unknown action type 'launch-rocket'" in p for p in problems
    )
    assert any(
        "b.yaml:execution.actions.0.command: command must not be empty" in p for p in problems
    )


def test_a_file_may_hold_a_list_of_rules_and_problems_name_the_item(tmp_path: Path) -> None:
    path = write_rule(
        tmp_path,
        "many.yaml",
        """
        - id: first
          triggers: [{type: manual}]
          execution: {kind: built-in, actions: [{type: run-command, command: "true"}]}
        - id: Second Rule
          triggers: [{type: manual}]
          execution: {kind: built-in, actions: [{type: run-command, command: "true"}]}
        """,
    )
    rules, problems = load_file(path)
    assert [r.rule.id for r in rules] == ["first"]
    assert [p.field for p in problems] == ["1.id"]


def test_aliases_resolve_and_defaults_are_filled() -> None:
    doc = parse_good()
    doc["triggers"] = [{"type": "commit"}, {"type": "git.pr_opened", "repo": "acme/api"}]
    rule = Rule.model_validate(doc)
    assert [t.type for t in rule.triggers] == ["git.commit", "github.pr_opened"]
    assert rule.billing_code == "auto:good" and rule.name == "good"
    assert rule.effective_queue == "ade.builtin"
    assert rule.execution.actions[0].id == "run-command-1"  # type: ignore[union-attr]


def test_step_timeout_is_clamped_to_one_second_and_twelve_hours() -> None:
    doc = parse_good()
    doc["execution"] = {
        "kind": "built-in",
        "actions": [
            {"id": "a", "type": "run-command", "command": "true", "timeout_sec": 0.01},
            {"id": "b", "type": "run-command", "command": "true", "timeout_sec": "2d"},
            {"id": "c", "type": "run-command", "command": "true"},
        ],
    }
    actions = Rule.model_validate(doc).execution.actions  # type: ignore[union-attr]
    assert [a.timeout_sec for a in actions] == [1.0, 43200.0, 300.0]


def test_stored_document_round_trips() -> None:
    doc = parse_good()
    doc["triggers"] = [{"type": "schedule", "cron": "0 3 * * *", "catchup_window": "2h"}]
    rule = Rule.model_validate(doc)
    assert Rule.model_validate(rule.document()) == rule


def test_parse_rule_rejects_a_non_mapping() -> None:
    problems = parse_rule(["not", "a", "rule"], "x.yaml")
    assert isinstance(problems, list) and "expected a mapping" in str(problems[0])


def test_cli_validate_prints_file_field_reason_and_exits_non_zero(tmp_path: Path) -> None:
    write_rule(tmp_path, "good.yaml", GOOD)
    write_rule(
        tmp_path, "bad.yaml", GOOD.replace("id: good", "id: bad").replace("manual", "schedule")
    )
    result = CliRunner().invoke(main, ["rules", "validate", str(tmp_path)])
    assert result.exit_code == 1
    assert (
        f"{tmp_path / 'bad.yaml'}:triggers.0: a schedule trigger needs exactly one of cron, "
        "run_at or delay_seconds" in result.output
    )
    assert "1 valid rule in 2 files, 1 problem" in result.output


def test_cli_validate_exits_zero_when_all_rules_are_valid(tmp_path: Path) -> None:
    write_rule(tmp_path, "good.yaml", GOOD)
    result = CliRunner().invoke(main, ["rules", "validate", str(tmp_path)])
    assert result.exit_code == 0, result.output


def test_cli_validate_reads_the_configured_rules_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_rule(tmp_path / "configured", "good.yaml", GOOD)
    monkeypatch.setenv("ADE_RULES_DIR", str(tmp_path / "configured"))
    result = CliRunner().invoke(main, ["rules", "validate"])
    assert result.exit_code == 0 and "1 valid rule in 1 file" in result.output


def test_a_literal_notify_url_is_refused_because_it_is_a_credential() -> None:
    problems = parse_rule(
        {
            "id": "n",
            "triggers": [{"type": "manual"}],
            "execution": {"kind": "built-in", "actions": [{"type": "run-command", "command": "x"}]},
            "outputs": {"disposition": "notify", "notify_url": "https://hooks.slack.com/T/B/X"},
        },
        "n.yaml",
    )
    assert isinstance(problems, list)
    assert "notify_url is a credential" in str(problems[0])


def test_a_stored_rule_whose_steps_no_longer_check_out_is_refused_whole() -> None:
    # A document read back (no admission context) runs the step checks at the rule's
    # `execution`: a template naming a step that does not exist is refused, naming the field.
    document = {
        "id": "stale",
        "triggers": [{"type": "manual"}],
        "execution": {"kind": "built-in", "actions": [
            {"id": "a", "type": "run-command", "command": "echo {{steps.gone.output}}"},
        ]},
    }  # fmt: skip
    with pytest.raises(ValueError, match=r"execution\n.*actions\.0\.command: .*gone"):
        Rule.model_validate(document)
    document["execution"]["actions"][0]["command"] = "echo fine"
    assert Rule.model_validate(document).execution.actions[0].id == "a"


def test_cli_validate_warns_of_a_project_these_settings_do_not_configure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 37, finding 8: a rule naming an unconfigured project is valid (another host may
    configure it), but validate says so instead of leaving it to the first run."""
    monkeypatch.setenv("ADE_PROJECTS__API", str(tmp_path))
    write_rule(tmp_path, "good.yaml", GOOD)
    write_rule(tmp_path, "api.yaml", GOOD.replace("id: good", "id: on-api\n    project: api"))
    write_rule(tmp_path, "web.yaml", GOOD.replace("id: good", "id: on-web\n    project: web"))

    result = CliRunner().invoke(main, ["rules", "validate", str(tmp_path)])

    assert result.exit_code == 0, result.output
    assert (
        "warning: rule 'on-web': project 'web' is not configured in these settings (known: api, "
        "default); its runs fail until ADE_PROJECTS__WEB=/path/to/repository is set"
    ) in result.output
    assert "on-api" not in result.output and "'good'" not in result.output
