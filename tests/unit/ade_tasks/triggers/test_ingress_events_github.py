"""Triggers that say what happened (issue 36, findings 1 and 3): GitHub's own example deliveries
stored and matched on SQLite as the ingress workers do, for `github.pr_labeled` /
`github.issue_labeled` with `label:`, the `actions:` filter, the catch-all `github.event`, and
the engine's own GitHub identity, which starts nothing unless a trigger opts in."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from ade_tasks.db.engine import SessionFactory
from ade_tasks.db.schema import IngressEventRow, RunRow
from ade_tasks.ingress import intake
from ade_tasks.ingress.github import normalize
from ade_tasks.rules.loader import parse_rule
from ade_tasks.rules.rule import Rule
from ade_tasks.templating import TemplateContext, render
from ade_tasks.testing import InMemorySender
from ade_tasks.triggers.ingress_events import match_ingress_event
from tests.fixtures import GITHUB_FIXTURES
from tests.unit.conftest import add_rule

HELLO = "Codertocat/Hello-World"
ENGINE = "ade-bot[bot]"


def rule(rule_id: str, trigger: str) -> str:
    return (
        f"id: {rule_id}\ntriggers: [{trigger}]\n"
        "execution: {kind: built-in, actions: [{type: run-command, command: 'true'}]}\n"
    )


def example(name: str, **changes: Any) -> dict[str, Any]:
    payload: dict[str, Any] = json.loads((GITHUB_FIXTURES / name).read_bytes())
    payload.update(changes)
    return payload


def labeled_pr(label: str = "agent-fix", sender: str = "Codertocat") -> dict[str, Any]:
    """GitHub's `pull_request.labeled` example, `label` just added (and so on the PR)."""
    payload = example("pull_request/labeled.payload.json", sender={"login": sender})
    payload["label"] = {**payload["label"], "name": label}
    payload["pull_request"]["labels"] = [{"name": label}]
    return payload


def pushed_pr(sha: str, sender: str = "Codertocat") -> dict[str, Any]:
    """GitHub's `pull_request.synchronize` example: commit `sha` pushed to a PR that carries
    `agent-fix` (each push is another body, so none is taken for a replay of another)."""
    payload = example("pull_request/synchronize.payload.json", sender={"login": sender})
    payload["pull_request"]["labels"] = [{"name": "agent-fix"}]
    payload["pull_request"]["head"]["sha"] = payload["after"] = sha * 40
    return payload


def deliver(
    session_factory: SessionFactory,
    sender: InMemorySender,
    event: str,
    payload: dict[str, Any],
    delivery: str,
    **options: Any,
) -> list[str]:
    """Store a delivery as the webhook endpoint does and match it as the ingress worker does;
    the rules of the runs it started."""
    normalized = normalize(event, delivery, payload)
    stored = intake.store_event(
        session_factory,
        sender,
        intake.github_row(normalized, delivery, json.dumps(payload).encode()),
    )
    if stored.event_id is None:
        return []  # a duplicate: stored once, matched once
    match_ingress_event(session_factory, sender, stored.event_id, **options)
    with session_factory() as session:
        row = session.get(IngressEventRow, stored.event_id)
        assert row is not None and row.status == "dispatched", row and row.error
        runs = list(row.runs or [])
        return sorted(session.scalars(select(RunRow.rule_id).where(RunRow.id.in_(runs))))


def runs_of(session_factory: SessionFactory) -> list[tuple[str, str, dict[str, Any]]]:
    with session_factory() as session:
        query = select(RunRow.rule_id, RunRow.trigger_type, RunRow.trigger)
        rows = [(rule_id, kind, trigger) for rule_id, kind, trigger in session.execute(query)]
    return sorted(rows, key=lambda row: (row[0], row[2]["delivery_id"]))


# --- finding 1: a label rule fires once, for the label --------------------------------------


def test_a_label_rule_on_pr_updated_fires_on_every_push_of_a_labelled_pr(
    session_factory: SessionFactory, sender: InMemorySender, rules_dir: Path
) -> None:
    """What finding 1 saw, and what still holds for `github.pr_updated` + `labels`: the label
    is present on every later delivery, so every push starts the rule again."""
    trigger = f"{{type: github.pr_updated, repo: {HELLO}, labels: [agent-fix]}}"
    add_rule(session_factory, rules_dir, "fix", rule("fix", trigger))

    started = [
        deliver(session_factory, sender, "pull_request", labeled_pr(), "d-label"),
        deliver(session_factory, sender, "pull_request", pushed_pr("1"), "d-push-1"),
        deliver(session_factory, sender, "pull_request", pushed_pr("2"), "d-push-2"),
    ]

    assert started == [["fix"], ["fix"], ["fix"]]


def test_pr_labeled_starts_one_run_for_the_label_and_none_for_later_pushes(
    session_factory: SessionFactory, sender: InMemorySender, rules_dir: Path
) -> None:
    trigger = f"{{type: github.pr_labeled, repo: {HELLO}, label: Agent-Fix}}"
    add_rule(session_factory, rules_dir, "fix", rule("fix", trigger))

    started = [
        deliver(session_factory, sender, "pull_request", labeled_pr(), "d-label"),
        deliver(session_factory, sender, "pull_request", pushed_pr("1"), "d-push-1"),
        deliver(session_factory, sender, "pull_request", pushed_pr("2"), "d-push-2"),
        deliver(session_factory, sender, "pull_request", labeled_pr("bug"), "d-other-label"),
    ]

    assert started == [["fix"], [], [], []]
    ((_, kind, trigger_payload),) = runs_of(session_factory)
    assert kind == "github.pr_labeled"
    assert trigger_payload["label"] == "agent-fix"
    assert trigger_payload["action"] == "labeled" and trigger_payload["event"] == "pull_request"
    context = TemplateContext(trigger_payload, {}, {}, datetime.now(UTC))
    text = "{{trigger.label}} on #{{trigger.number}} by {{trigger.sender}}"
    assert render(text, context, "steps.0") == "agent-fix on #2 by Codertocat"


def test_the_actions_filter_narrows_pr_updated_to_pushes(
    session_factory: SessionFactory, sender: InMemorySender, rules_dir: Path
) -> None:
    trigger = "{type: github.pr_updated, actions: [synchronize], labels: [agent-fix]}"
    add_rule(session_factory, rules_dir, "push", rule("push", trigger))

    started = [
        deliver(session_factory, sender, "pull_request", labeled_pr(), "d-label"),
        deliver(session_factory, sender, "pull_request", pushed_pr("1"), "d-push"),
    ]

    assert started == [[], ["push"]]


def test_issue_labeled_filters_on_the_label_just_added(
    session_factory: SessionFactory, sender: InMemorySender, rules_dir: Path
) -> None:
    add_rule(
        session_factory,
        rules_dir,
        "bugs",
        rule("bugs", "{type: github.issue_labeled, label: [bug, crash]}"),
    )
    add_rule(
        session_factory,
        rules_dir,
        "docs",
        rule("docs", "{type: github.issue_labeled, label: docs}"),
    )

    started = deliver(
        session_factory, sender, "issues", example("issues/labeled.payload.json"), "d-issue"
    )

    assert started == ["bugs"]
    ((_, _, trigger_payload),) = runs_of(session_factory)
    assert trigger_payload["label"] == "bug"


# --- finding 3: any GitHub event can start a rule -------------------------------------------


@pytest.mark.parametrize(
    ("event", "fixture", "trigger"),
    [
        ("check_suite", "check_suite/completed.payload.json", "actions: [completed]"),
        (
            "pull_request_review_comment",
            "pull_request_review_comment/created.payload.json",
            "branches: [changes]",
        ),
        ("deployment_status", "deployment_status/payload.json", "repo: codertocat/hello-world"),
    ],
)
def test_an_event_without_a_trigger_type_starts_a_github_event_rule(
    session_factory: SessionFactory,
    sender: InMemorySender,
    rules_dir: Path,
    event: str,
    fixture: str,
    trigger: str,
) -> None:
    add_rule(session_factory, rules_dir, "pr", rule("pr", "{type: github.pr_opened}"))
    add_rule(
        session_factory,
        rules_dir,
        "any",
        rule("any", f"{{type: github.event, event: {event}, {trigger}}}"),
    )
    add_rule(
        session_factory,
        rules_dir,
        "other",
        rule("other", "{type: github.event, event: workflow_job}"),
    )

    started = deliver(session_factory, sender, event, example(fixture), f"d-{event}")

    assert started == ["any"]
    ((_, kind, trigger_payload),) = runs_of(session_factory)
    assert kind == "github.event"
    assert (trigger_payload["event"], trigger_payload["trigger_type"]) == (event, None)
    assert trigger_payload["repo"] == HELLO and trigger_payload["sender"] == "Codertocat"
    assert trigger_payload["data"]["action"] == trigger_payload["action"]
    assert {"repository", "sender"}.isdisjoint(trigger_payload["data"])


def test_a_github_event_run_sees_the_fields_its_event_carries(
    session_factory: SessionFactory, sender: InMemorySender, rules_dir: Path
) -> None:
    add_rule(
        session_factory,
        rules_dir,
        "review",
        rule(
            "review", "{type: github.event, event: pull_request_review_comment, actions: [created]}"
        ),
    )

    deliver(
        session_factory,
        sender,
        "pull_request_review_comment",
        example("pull_request_review_comment/created.payload.json"),
        "d-review",
    )

    ((_, _, trigger),) = runs_of(session_factory)
    assert trigger["action"] == "created" and trigger["number"] == 2
    assert trigger["branch"] == "changes" and trigger["base"] == "master"
    assert trigger["body"] == "Maybe you should use more emoji on this line."
    assert trigger["data"]["comment"]["path"] == "README.md"
    assert trigger["summary"].startswith("GitHub pull_request_review_comment.created by Codertocat")


def test_a_github_event_rule_also_sees_events_that_have_a_trigger_type(
    session_factory: SessionFactory, sender: InMemorySender, rules_dir: Path
) -> None:
    add_rule(
        session_factory,
        rules_dir,
        "both",
        rule("both", "{type: github.pr_labeled}, {type: github.event, event: pull_request}"),
    )

    started = deliver(session_factory, sender, "pull_request", labeled_pr(), "d-label")

    assert started == ["both"]  # one run, from its first matching trigger
    ((_, kind, _),) = runs_of(session_factory)
    assert kind == "github.pr_labeled"


# --- the engine's own identity ---------------------------------------------------------------


def test_the_engines_own_push_starts_nothing_unless_the_trigger_opts_in(
    session_factory: SessionFactory, sender: InMemorySender, rules_dir: Path
) -> None:
    add_rule(session_factory, rules_dir, "tests", rule("tests", "{type: github.pr_updated}"))
    add_rule(
        session_factory, rules_dir, "any", rule("any", "{type: github.event, event: pull_request}")
    )
    add_rule(
        session_factory,
        rules_dir,
        "mine",
        rule("mine", "{type: github.pr_updated, actions: [synchronize], include_own: true}"),
    )

    own = deliver(
        session_factory,
        sender,
        "pull_request",
        pushed_pr("1", ENGINE),
        "d-own",
        own_logins=["ADE-BOT[bot]"],
    )
    human = deliver(
        session_factory, sender, "pull_request", pushed_pr("2"), "d-human", own_logins=[ENGINE]
    )

    assert own == ["mine"]
    assert human == ["any", "mine", "tests"]
    by_engine = {run[2]["delivery_id"]: run[2]["by_engine"] for run in runs_of(session_factory)}
    assert by_engine == {"d-own": True, "d-human": False}


def test_the_same_delivery_twice_starts_each_new_trigger_once(
    session_factory: SessionFactory, sender: InMemorySender, rules_dir: Path
) -> None:
    add_rule(
        session_factory,
        rules_dir,
        "fix",
        rule("fix", "{type: github.pr_labeled, label: agent-fix}"),
    )
    add_rule(
        session_factory, rules_dir, "ci", rule("ci", "{type: github.event, event: check_suite}")
    )
    suite = example("check_suite/completed.payload.json")

    first = [
        deliver(session_factory, sender, "pull_request", labeled_pr(), "d-label"),
        deliver(session_factory, sender, "check_suite", suite, "d-suite"),
    ]
    again = [
        deliver(session_factory, sender, "pull_request", labeled_pr(), "d-label"),
        deliver(session_factory, sender, "check_suite", suite, "d-suite"),
    ]

    assert first == [["fix"], ["ci"]] and again == [[], []]
    assert [rule_id for rule_id, _, _ in runs_of(session_factory)] == ["ci", "fix"]


# --- validation ------------------------------------------------------------------------------


def problems(trigger: dict[str, Any]) -> list[str]:
    execution = {"kind": "built-in", "actions": [{"type": "run-command", "command": "true"}]}
    parsed = parse_rule({"id": "r", "triggers": [trigger], "execution": execution}, "r.yaml")
    return [] if isinstance(parsed, Rule) else [str(p) for p in parsed]


@pytest.mark.parametrize(
    ("trigger", "message"),
    [
        (
            {"type": "github.pr_updated", "actions": ["synchronise"]},
            "unknown action(s) synchronise for github.pr_updated: it runs on edited, labeled, "
            "ready_for_review, synchronize, unlabeled; for other actions use `type: github.event`",
        ),
        (
            {"type": "github.event", "event": "check_suite", "actions": ["finished"]},
            "unknown action(s) finished for check_suite deliveries: it runs on completed, "
            "requested, rerequested",
        ),
        (
            {"type": "github.event", "event": "push", "actions": ["x"]},
            "push deliveries carry no action",
        ),
        ({"type": "github.event"}, "a github.event trigger needs `event:`"),
        ({"type": "github.pr_opened", "event": "check_suite"}, "`event` applies to github.event"),
        ({"type": "github.pr_updated", "label": "agent-fix"}, "`label` (the label just added)"),
        ({"type": "github.event", "event": "Check Suite"}, "triggers.0.event"),
    ],
)
def test_a_trigger_that_cannot_fit_its_type_is_refused_saying_what_to_write(
    trigger: dict[str, Any], message: str
) -> None:
    found = problems(trigger)
    assert any(message in problem for problem in found), found


@pytest.mark.parametrize(
    "trigger",
    [
        {"type": "github.pr_labeled", "label": "agent-fix", "actions": ["labeled"]},
        {"type": "github.issue_labeled", "label": ["bug", "crash"]},
        {"type": "github.event", "event": "repository_dispatch", "actions": ["anything"]},
        {"type": "github.event", "event": "pull_request_review_thread", "actions": ["resolved"]},
        {"type": "git.pr_opened", "actions": ["reopened"], "include_own": True},
        {"type": "git.push", "include_own": True},
    ],
)
def test_triggers_that_fit_their_type_are_accepted(trigger: dict[str, Any]) -> None:
    assert problems(trigger) == []


def test_a_stored_github_trigger_keeps_its_document_without_the_new_fields() -> None:
    """The new fields default to None, so a rule stored before them keeps its content hash."""
    execution = {"kind": "built-in", "actions": [{"type": "run-command", "command": "true"}]}
    parsed = parse_rule(
        {"id": "r", "triggers": [{"type": "github.pr_opened"}], "execution": execution}, "r.yaml"
    )
    assert isinstance(parsed, Rule)
    stored = parsed.document()["triggers"][0]
    assert {"event", "actions", "label", "include_own"}.isdisjoint(stored)
