"""Template references to trigger fields are checked at load (issue 37, finding 8): a name the
rule's triggers never give is refused with the file, the field, the reference and what exists;
what only the run can know (a webhook's body, a GitHub event's data) is not refused."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from ade_tasks.db.lanes import LaneRef
from ade_tasks.errors import RuleProblem
from ade_tasks.ingress.event import NormalizedEvent
from ade_tasks.rules.loader import load_rules_dir
from ade_tasks.rules.references import EVENT, LANE
from tests.conftest import write_rule

MANUAL = """
id: r
triggers: [{type: manual}]
inputs:
  number: {type: number, default: 1}
  target: {type: string, default: tests}
execution:
  kind: built-in
  actions:
    - {id: first, type: run-command, command: "echo %s"}
"""


def problems(tmp_path: Path, text: str) -> list[RuleProblem]:
    write_rule(tmp_path, "r.yaml", text)
    return load_rules_dir(tmp_path).problems


def test_an_undeclared_input_is_refused_with_the_declared_ones_and_the_likeliest(
    tmp_path: Path,
) -> None:
    (problem,) = problems(tmp_path, MANUAL % "{{trigger.inputs.nmber}}")
    assert problem.file.endswith("r.yaml")
    assert problem.field == "execution.actions.0.command"
    assert problem.reason == (
        "unknown variable trigger.inputs.nmber; the rule's triggers give trigger.inputs no "
        "field 'nmber'; did you mean trigger.inputs.number? (trigger.inputs fields: number, "
        "target)"
    )


def test_a_field_no_trigger_of_the_rule_gives_is_refused_in_every_templated_place(
    tmp_path: Path,
) -> None:
    text = """
    id: r
    triggers: [{type: github.pr_opened, repo: acme/api}]
    concurrency: {key: "pr-{{trigger.nubmer}}"}
    outputs: {pr_title: "Fix {{trigger.titel}}"}
    execution:
      kind: built-in
      actions:
        - id: a
          type: run-command
          command: "echo {{trigger.title}}"
          condition: "trigger.draft == false and trigger.lable == 'x'"
        - {id: b, type: run-command, command: "echo", env: {WHO: "{{trigger.auther}}"}}
    """
    found = {(p.field, p.reason.split(";")[0]) for p in problems(tmp_path, text)}
    assert found == {
        ("concurrency.key", "unknown variable trigger.nubmer"),
        ("outputs.pr_title", "unknown variable trigger.titel"),
        ("execution.actions.0.condition", "unknown variable trigger.lable"),
        ("execution.actions.1.env", "unknown variable trigger.auther"),
    }
    meant = {p.reason.split("did you mean ")[1].split("?")[0] for p in problems(tmp_path, text)}
    assert meant == {"trigger.number", "trigger.title", "trigger.label", "trigger.author"}


def test_an_agent_executions_prompt_and_thread_are_checked(tmp_path: Path) -> None:
    text = """
    id: r
    triggers: [{type: schedule, cron: "0 3 * * *"}]
    execution:
      kind: agent-session
      provider: openai
      model: m
      thread: "nightly-{{trigger.slot}}"
      prompt: "Look at {{trigger.repo}} and {{steps.x.output}}"
    """
    reasons = sorted((p.field, p.reason.split(";")[0]) for p in problems(tmp_path, text))
    assert reasons == [
        ("execution.prompt", "unknown variable steps.x.output"),
        ("execution.prompt", "unknown variable trigger.repo"),
    ]


@pytest.mark.parametrize(
    ("triggers", "reference"),
    [
        ("[{type: webhook, hook: deploys}]", "trigger.body.anything.at.all"),
        ("[{type: github.event, event: check_suite}]", "trigger.data.check_suite.conclusion"),
        ("[{type: github.pr_opened}]", "trigger.labels.0"),
        ("[{type: git.push}]", "trigger.fields.ticket"),
        ("[{type: run.finished, rule: other}]", "trigger.run.outputs.build.output"),
        ("[{type: lane.created}]", "trigger.lane.branch"),
        ("[{type: manual}, {type: schedule, cron: '0 3 * * *'}]", "trigger.inputs.target"),
        ("[{type: manual}, {type: schedule, cron: '0 3 * * *'}]", "trigger.cron"),
        ("[{type: schedule, cron: '0 3 * * *'}]", "trigger.retry_of"),
    ],
)
def test_what_a_trigger_may_give_is_not_refused(
    tmp_path: Path, triggers: str, reference: str
) -> None:
    text = (MANUAL % f"{{{{{reference}}}}}").replace("[{type: manual}]", triggers)
    assert problems(tmp_path, text) == []


def test_a_rule_without_declared_inputs_takes_any_input(tmp_path: Path) -> None:
    text = """
    id: r
    triggers: [{type: manual}]
    execution: {kind: built-in, actions: [{type: run-command, command: "echo {{trigger.inputs.x}}"}]}
    """
    assert problems(tmp_path, text) == []


def test_the_catalogue_names_what_the_payloads_carry() -> None:
    assert set(EVENT) == {field.name for field in dataclasses.fields(NormalizedEvent)}
    lane = LaneRef(id="1", name="n", branch="b", path=Path("/p"), base_ref="main", base_sha="0")
    assert set(LANE) == set(lane.to_dict())
