"""The action reference is derived from the declarations: every allow-listed action with every
argument of its model, who may call it from `admin_only`, every step type from the step registry,
and a new action or step type appears without another edit."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import pytest
from pydantic import BaseModel, ConfigDict, Field

from ade_tasks.rules import action_reference
from ade_tasks.rules.action_reference import ade_actions, catalog, common_step_fields, step_types
from ade_tasks.rules.ade_actions import CATALOG, AdeAction
from ade_tasks.rules.steps import ACTION_MODELS, Step


def test_every_allow_listed_action_is_listed_with_every_argument_of_its_model() -> None:
    listed = {action.name: action for action in ade_actions()}

    assert list(listed) == sorted(CATALOG)
    for name, spec in CATALOG.items():
        assert [arg.name for arg in listed[name].arguments] == list(spec.args.model_fields)
        assert listed[name].description == spec.description


def test_admin_only_actions_are_for_rules_from_the_rules_directory_alone() -> None:
    listed = {action.name: action for action in ade_actions()}

    assert listed["runs.cancel"].admin_only
    assert listed["runs.cancel"].rule_origins == ("rules-dir",)
    assert listed["github.comment"].rule_origins == ("rules-dir", "shared", "api")
    assert listed["lanes.list"].side_effect_free


class ToyArgs(BaseModel):
    """A toy action's arguments."""

    model_config = ConfigDict(extra="forbid")
    target: str = Field(min_length=1, max_length=10, description="what to poke")
    times: int = Field(default=2, ge=1, le=5)
    mode: Literal["soft", "hard"] = "soft"
    tags: list[str] = Field(default_factory=lambda: ["a"])


class ToyStep(Step):
    """Poke something once."""

    type: Literal["poke"]
    target: str
    timeout_sec: float = 5.0


def test_a_new_action_and_step_type_are_described_from_their_models_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a toy action in the allow-list and a toy step type in the step registry
    toy = AdeAction("toy.poke", ToyArgs, "Poke a thing.", admin_only=True, secret_args=("target",))
    monkeypatch.setattr(action_reference, "CATALOG", {**CATALOG, toy.name: toy})
    monkeypatch.setattr(action_reference, "ACTION_MODELS", {**ACTION_MODELS, "poke": ToyStep})

    # When the reference is built
    data = catalog()

    # Then the action's arguments say their type, whether required, default, description, limits
    action = next(a for a in data["ade_actions"] if a["name"] == "toy.poke")
    assert action["arguments"] == [
        {
            "name": "target",
            "type": "string",
            "required": True,
            "default": None,
            "description": "what to poke",
            "limits": ["not empty", "at most 10 characters"],
        },
        {
            "name": "times",
            "type": "integer",
            "required": False,
            "default": 2,
            "description": "",
            "limits": [">= 1", "<= 5"],
        },
        {
            "name": "mode",
            "type": "one of soft|hard",
            "required": False,
            "default": "soft",
            "description": "",
            "limits": [],
        },
        {
            "name": "tags",
            "type": "list of string",
            "required": False,
            "default": ["a"],
            "description": "",
            "limits": [],
        },
    ]
    assert (action["admin_only"], action["rule_origins"], action["secret_args"]) == (
        True,
        ["rules-dir"],
        ["target"],
    )
    # And the step type lists its own fields and the common one whose default it changes
    step = next(s for s in data["step_types"] if s["type"] == "poke")
    assert step["description"] == "Poke something once."
    assert sorted((f["name"], f["default"]) for f in step["fields"]) == [
        ("target", None),
        ("timeout_sec", 5.0),
    ]


def test_step_types_follow_the_registry_and_share_the_common_fields() -> None:
    types = step_types()

    assert [step.type for step in types] == list(ACTION_MODELS)
    assert [field.name for field in common_step_fields()] == list(Step.model_fields)
    run_command = next(step for step in types if step.type == "run-command")
    command = next(field for field in run_command.fields if field.name == "command")
    assert (command.type, command.required) == ("string or list of string", True)


def test_the_docs_table_names_every_action_and_argument() -> None:
    # docs/actions.md explains each action in prose; the list itself comes from the catalog
    docs = (Path(__file__).resolve().parents[4] / "docs" / "actions.md").read_text()
    section = docs.split("## `ade-action`", 1)[1]

    for action in ade_actions():
        assert f"`{action.name}`" in section, action.name
        for argument in action.arguments:
            assert f"`{argument.name}`" in section, (action.name, argument.name)
