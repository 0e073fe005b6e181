"""What a rule's chain can call: the `ade-action` allow-list (arguments, who may call each) and
the built-in step types (fields), as `ade_tasks.rules.action_reference` derives them from their
declarations. Any token may read it (`viewer`): it holds no secret and no cluster state."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, Field

from ade_tasks.rules.action_reference import catalog

router = APIRouter(prefix="/api/v1/actions", tags=["actions"])


class ParameterOut(BaseModel):
    """One argument of an `ade-action` or field of a step type."""

    name: str
    type: str = Field(description="the JSON type in words: string, list of string, one of a|b")
    required: bool
    default: Any = Field(description="the value used when it is left out (null: none)")
    description: str
    limits: list[str] = Field(description="what a value must fit, e.g. `at most 36 characters`")


class AdeActionOut(BaseModel):
    """One allow-listed internal action an `ade-action` step may call."""

    name: str = Field(description="what a step writes as `action:`, e.g. github.comment")
    description: str
    arguments: list[ParameterOut] = Field(description="what a step writes under `args:`")
    admin_only: bool = Field(
        description="only rules from the cluster's rules directory may call it"
    )
    side_effect_free: bool = Field(
        description="it only reads, so it runs before a `require_human` approval"
    )
    secret_args: list[str] = Field(description="arguments written as ${env:NAME} references")
    rule_origins: list[str] = Field(
        description="where a rule calling it may come from: rules-dir, shared, api"
    )


class StepTypeOut(BaseModel):
    """One built-in step type of a chain (`execution.actions[].type`)."""

    type: str
    description: str
    fields: list[ParameterOut] = Field(
        description="its own fields, beside `common_step_fields` (and those whose default it "
        "changes)"
    )


class ActionsOut(BaseModel):
    """Everything a built-in chain can call."""

    ade_actions: list[AdeActionOut]
    step_types: list[StepTypeOut]
    common_step_fields: list[ParameterOut] = Field(description="fields every step has")
    rule_origins: dict[str, bool] = Field(
        description="each origin a rule can have, and whether it may call admin-only actions"
    )


@router.get("")
def list_actions() -> ActionsOut:
    """The `ade-action` allow-list with each action's arguments and the rules that may call
    it, and the built-in step types with their fields."""
    return ActionsOut.model_validate(catalog())
