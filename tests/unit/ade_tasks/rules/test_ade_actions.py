"""The ade-action catalog at rule load: the allow-list, typed arguments, identity fields and
admin-only actions."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from pydantic import BaseModel

from ade_tasks.errors import InvalidInputError
from ade_tasks.guardrails.approval import approval_gate
from ade_tasks.rules.ade_actions import (
    CATALOG,
    IDENTITY_FIELDS,
    GithubCommentArgs,
    check_step,
    strip_identity,
    validate_args,
)
from ade_tasks.rules.loader import load_rules_dir, parse_rule
from ade_tasks.rules.rule import Rule
from ade_tasks.rules.steps import AdeActionStep
from ade_tasks.states import CleanupStatus, LaneStatus
from ade_workers.actions.ade_action import HANDLERS
from tests.conftest import write_rule


def rule_with(steps: str) -> str:
    return "id: r\ntriggers: [{type: manual}]\nexecution:\n  kind: built-in\n  actions:\n" + (
        textwrap.indent(textwrap.dedent(steps).strip(), "    ") + "\n"
    )


def problems_of(tmp_path: Path, steps: str) -> list[str]:
    write_rule(tmp_path, "r.yaml", rule_with(steps))
    result = load_rules_dir(tmp_path)
    return [str(p) for p in result.problems]


def test_every_catalog_entry_is_described_strict_and_executable() -> None:
    for name, spec in CATALOG.items():
        assert spec.name == name and spec.description.endswith(".")
        assert spec.args.model_config.get("extra") == "forbid"
        assert not (spec.admin_only and spec.side_effect_free)
    assert set(HANDLERS) == set(CATALOG)


def test_status_arguments_offer_exactly_the_stored_statuses() -> None:
    lanes = CATALOG["lanes.list"].args.model_fields["status"].annotation
    cleanups = CATALOG["cleanups.list"].args.model_fields["status"].annotation
    assert set(lanes.__args__) == {*LaneStatus, "all"}  # type: ignore[union-attr]
    assert set(cleanups.__args__) == {*CleanupStatus, "all"}  # type: ignore[union-attr]


def test_an_unknown_action_is_refused_at_load_with_the_allow_list(tmp_path: Path) -> None:
    (problem,) = problems_of(tmp_path, "- {id: go, type: ade-action, action: deploy.now}")

    assert problem.endswith(
        "r.yaml:execution.actions.0.action: ade-action 'deploy.now' is not on the allow-list; "
        "available: cleanups.cancel, cleanups.list, github.add_labels, github.comment, "
        "lanes.list, notify.send, rules.disable, rules.enable, runs.cancel"
    )


def test_bad_arguments_are_refused_at_load_one_line_per_argument(tmp_path: Path) -> None:
    problems = problems_of(
        tmp_path,
        """
        - id: label
          type: ade-action
          action: github.add_labels
          args: {repo: acme, number: 0, labels: [], colour: red}
        """,
    )

    step = "r.yaml:execution.actions.0.args"
    assert [p.split(f"{step}.", 1)[1].split(":")[0] for p in problems] == [
        "repo", "number", "labels", "colour",
    ]  # fmt: skip
    assert f"{step}.repo: 'acme' does not fit; write the repository as owner/name" in problems[0]
    assert (
        f"{step}.colour: unknown argument of github.add_labels; its arguments: repo, "
        in problems[3]
    )


def test_a_missing_argument_names_the_action() -> None:
    assert check_step("cleanups.cancel", {}, admin=True) == [
        "args.cleanup_id: cleanups.cancel needs this argument"
    ]


def test_more_than_twenty_labels_are_refused() -> None:
    labels = [f"l{i}" for i in range(21)]
    (problem,) = check_step(
        "github.add_labels", {"repo": "a/b", "number": 1, "labels": labels}, admin=True
    )
    assert problem == "args.labels: must hold at most 20 items, not 21"


def test_templated_and_secret_arguments_are_accepted_at_load(tmp_path: Path) -> None:
    problems = problems_of(
        tmp_path,
        """
        - id: comment
          type: ade-action
          action: github.comment
          args: {repo: "{{trigger.inputs.repo}}", number: "{{trigger.inputs.number}}", body: "Seen {{date}}"}
        - id: label
          type: ade-action
          action: github.add_labels
          args: {repo: acme/api, number: 3, labels: ["{{steps.comment.output}}"]}
        - {id: ping, type: ade-action, action: notify.send,
           args: {url: "${env:SLACK_URL}", text: hi}}
        """,
    )

    assert problems == []


def test_a_template_does_not_excuse_a_literal_that_is_wrong() -> None:
    (problem,) = check_step(
        "github.comment", {"repo": "{{trigger.repo}}", "number": "seven", "body": "x"}, admin=True
    )
    assert problem == "args.number: must be a whole number, not the string 'seven'"


def test_a_literal_notify_url_is_refused_as_a_credential_in_the_rule() -> None:
    (problem,) = check_step(
        "notify.send", {"url": "https://hooks.example/T/B/x", "text": "hi"}, admin=True
    )
    assert problem.startswith("args.url: notify.send's url is a credential; write it as a secret")
    assert "${env:SLACK_WEBHOOK_URL}" in problem


def test_identity_fields_are_stripped_with_a_note() -> None:
    args = {"repo": "a/b", "number": 1, "body": "x", "Requested-By": "ceo", "token": "t"}

    kept, notes = strip_identity(args)

    assert kept == {"repo": "a/b", "number": 1, "body": "x"}
    assert len(notes) == 2
    assert notes[0].startswith("ignored argument 'Requested-By': an ade-action always acts as")
    assert {"author", "user", "actor", "sender", "on_behalf_of", "as_user", "role"} <= (
        IDENTITY_FIELDS
    )


def test_identity_fields_never_make_a_step_invalid_at_load(tmp_path: Path) -> None:
    problems = problems_of(
        tmp_path,
        """
        - id: c
          type: ade-action
          action: github.comment
          args: {repo: a/b, number: 1, body: x, author: alice, on_behalf_of: bob}
        """,
    )
    assert problems == []


def test_admin_only_actions_are_refused_for_a_non_admin_rule() -> None:
    for action, args in [
        ("runs.cancel", {"run_id": "r-1"}),
        ("rules.enable", {"rule_id": "nightly"}),
        ("rules.disable", {"rule_id": "nightly"}),
    ]:
        (problem,) = check_step(action, args, admin=False)
        assert problem.startswith(f"ade-action {action!r} is admin-only")
        assert check_step(action, args, admin=True) == []


def test_rule_files_count_as_admin(tmp_path: Path) -> None:
    problems = problems_of(
        tmp_path, "- {type: ade-action, action: rules.disable, args: {rule_id: nightly}}"
    )
    assert problems == []


def test_validate_args_types_the_rendered_arguments() -> None:
    parsed = validate_args("github.comment", {"repo": "a/b", "number": "7", "body": "hi"})

    assert isinstance(parsed, GithubCommentArgs) and parsed.number == 7
    with pytest.raises(
        InvalidInputError, match=r"args\.number: must be a whole number, not the string"
    ):
        validate_args("github.comment", {"repo": "a/b", "number": "x", "body": "hi"})
    with pytest.raises(InvalidInputError, match="not on the allow-list"):
        validate_args("deploy.now", {})


def test_listing_arguments_have_defaults() -> None:
    lanes: BaseModel = validate_args("lanes.list", {})
    cleanups: BaseModel = validate_args("cleanups.list", {})
    assert lanes.model_dump() == {"status": "active"}
    assert cleanups.model_dump() == {"status": "all"}


def test_require_human_lets_side_effect_free_ade_actions_run_before_the_gate() -> None:
    rule = parse_rule(
        {
            "id": "r",
            "triggers": [{"type": "manual"}],
            "guardrails": {"require_human": True},
            "execution": {
                "kind": "built-in",
                "actions": [
                    {"type": "ade-action", "action": "lanes.list"},
                    {"type": "ade-action", "action": "cleanups.list"},
                    {"type": "ade-action", "action": "cleanups.cancel", "args": {"cleanup_id": 1}},
                ],
            },
        },
        "r.yaml",
    )
    assert isinstance(rule, Rule)
    assert all(isinstance(a, AdeActionStep) for a in rule.execution.actions)  # type: ignore[union-attr]
    assert approval_gate(rule) == 2
