"""The trigger matchers by kind: every matchable kind has one, an unknown kind is refused with
the kinds that are known, and each family answers for its own triggers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import TypeAdapter

from ade_tasks.db.engine import SessionFactory
from ade_tasks.errors import NotFoundError
from ade_tasks.ingress import intake
from ade_tasks.rules.rule import Rule
from ade_tasks.rules.triggers import Trigger, TriggerType
from ade_tasks.states import IngressStatus
from ade_tasks.testing import InMemorySender
from ade_tasks.triggers.ingress_events import match_ingress_event
from ade_tasks.triggers.lane import lane_event
from ade_tasks.triggers.matcher import Refusal
from ade_tasks.triggers.registry import follow_on_events, matcher_for, matchers
from tests.unit.ade_tasks.triggers.test_ingress_events import event_of

TRIGGER: TypeAdapter[Any] = TypeAdapter(Trigger)
LANE = {"id": "l1", "name": "fix-login", "path": "/lanes/fix-login", "branch": "ade/fix-login"}


def a_rule(project: str = "default") -> Rule:
    return Rule.model_validate(
        {
            "id": "r",
            "project": project,
            "triggers": [{"type": "manual"}],
            "execution": {"kind": "built-in", "actions": [{"type": "run-command", "command": "x"}]},
        }
    )


def test_every_trigger_kind_but_schedule_and_manual_has_a_matcher() -> None:
    # Given the trigger kinds a rule may name
    matched_by_events = {kind.value for kind in TriggerType} - {"schedule", "manual"}

    # Then exactly those are registered: schedules are claimed by the beat, manual runs by the API
    assert set(matchers()) == matched_by_events


def test_an_unknown_trigger_kind_is_refused_with_the_kinds_that_are_known() -> None:
    with pytest.raises(NotFoundError) as refused:
        matcher_for("github.pr_exploded")

    message = refused.value.message
    assert message.startswith("'github.pr_exploded' is not a trigger kind this worker knows (")
    assert ", ".join(sorted(matchers())) in message
    assert message.endswith("update the workers to the version that stored the event")


def test_a_webhook_trigger_matches_only_its_own_hooks_deliveries_whose_body_fits() -> None:
    trigger = TRIGGER.validate_python(
        {"type": "webhook", "hook": "deploy", "filters": {"env": "prod"}}
    )
    match = matcher_for("webhook")

    assert match("webhook:deploy", {"body": {"env": "prod"}})(a_rule(), trigger) is None
    assert match("webhook:deploy", {"body": {"env": "dev"}})(a_rule(), trigger) == Refusal(
        "filters", "filter #1 (env equals 'prod') did not match: env is 'dev'"
    )
    assert match("webhook:other", {"body": {"env": "prod"}})(a_rule(), trigger) == Refusal(
        "hook", "the delivery came to hook other, not deploy"
    )
    # A source naming no hook is no custom hook's delivery
    assert match("webhook", {"body": {"env": "prod"}})(a_rule(), trigger) == Refusal(
        "hook", "the event came from webhook, not from a custom hook"
    )


def test_a_lane_trigger_matches_lanes_of_its_own_project_its_globs_accept() -> None:
    event = lane_event("lane.created", LANE, "default", "run-1")
    match = matcher_for("lane.created")("lane", event.payload)

    assert match(a_rule(), TRIGGER.validate_python({"type": "lane.created"})) is None
    assert match(
        a_rule(), TRIGGER.validate_python({"type": "lane.created", "lanes": ["fix-*"]})
    ) is None  # fmt: skip
    globbed = TRIGGER.validate_python({"type": "lane.created", "lanes": ["x*"]})
    assert match(a_rule(), globbed) == Refusal("lanes", f"lane {LANE['name']} matches none of x*")
    assert match(a_rule("other"), TRIGGER.validate_python({"type": "lane.created"})) == Refusal(
        "project", "the lane is in project default, not other"
    )


def test_only_a_merged_pull_request_stands_for_further_events(
    session_factory: SessionFactory,
) -> None:
    payload = {"branch": "ade/fix-login", "repo": "acme/api", "number": 7}

    assert follow_on_events(session_factory, "github.pr_opened", payload) == []
    assert follow_on_events(session_factory, "github.pr_merged", {**payload, "branch": None}) == []


def test_a_stored_event_of_a_kind_no_matcher_knows_is_failed_with_the_known_kinds(
    session_factory: SessionFactory, sender: InMemorySender, rules_dir: Path
) -> None:
    # Given an event a newer API stored with a trigger kind these workers do not know
    row = intake.event_row(
        source="github",
        delivery_id="future",
        event=None,
        event_key="future",
        payload={},
        digest=None,
        trigger_type="github.pr_exploded",
    )
    event_id = intake.store_event(session_factory, sender, row).event_id
    assert event_id is not None

    # When the workers match it
    status = match_ingress_event(session_factory, sender, event_id)

    # Then it is failed, saying which kinds they know and what to do
    stored = event_of(session_factory, event_id)
    assert status == IngressStatus.FAILED
    assert stored.error is not None
    assert "'github.pr_exploded' is not a trigger kind this worker knows" in stored.error
    assert "github.pr_opened" in stored.error and "update the workers" in stored.error
