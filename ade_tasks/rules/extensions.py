"""Extensions of the rule document registered at run time: an action type's step model, a
trigger kind's model, a guardrail's own configuration. Each joins its registry here and the rule
models are rebuilt, so a rule naming it validates; `unregister_*` takes it out again.

The registries of the layers above call these as part of their one registration line (an
`ade_workers.actions.registry.ActionType`, an `ade_tasks.triggers.registry.TriggerKind`, an
`ade_tasks.guardrails.registry` guardrail); the built-in models are in the registries already
(`ACTION_TYPES`, `TRIGGER_MODELS` and the fields of `Guardrails`), because rules are validated
where those layers are not loaded, so registering a built-in's model again changes nothing.
"""

from __future__ import annotations

from types import GenericAlias
from typing import Any

from pydantic import create_model

from ade_tasks.rules import steps, triggers
from ade_tasks.rules.document import Document
from ade_tasks.rules.guardrails import Guardrails
from ade_tasks.rules.rule import Rule
from ade_tasks.rules.steps import BuiltinExecution, Step, action_name, action_union
from ade_tasks.rules.triggers import TriggerDocument, trigger_kinds, trigger_union

#: A guardrail's key under a rule's `guardrails:` -> the model of its configuration.
GUARDRAIL_CONFIGS: dict[str, type[Document]] = {}


def register_action_model(model: type[Step]) -> None:
    """Let rules name the action type `model` declares; ValueError if another model has its
    name."""
    name = action_name(model)
    known = steps.ACTION_MODELS.get(name)
    if known is model:
        return
    if known is not None:
        raise ValueError(f"action type {name!r} is registered already, by {known.__name__}")
    steps.ACTION_MODELS[name] = model
    rebuild_rule_models()


def unregister_action_model(model: type[Step]) -> None:
    """Rules may no longer name `model`'s action type."""
    if steps.ACTION_MODELS.get(action_name(model)) is model:
        del steps.ACTION_MODELS[action_name(model)]
        rebuild_rule_models()


def register_trigger_model(model: type[TriggerDocument]) -> None:
    """Let rules name the trigger kinds `model` declares; ValueError if a registered model
    declares one of them."""
    if model in triggers.TRIGGER_MODELS:
        return
    taken = sorted(set(trigger_kinds(model)) & triggers.known_trigger_types())
    if taken:
        raise ValueError(f"trigger kind {', '.join(map(repr, taken))} is registered already")
    triggers.TRIGGER_MODELS = (*triggers.TRIGGER_MODELS, model)
    rebuild_rule_models()


def unregister_trigger_model(model: type[TriggerDocument]) -> None:
    """Rules may no longer name `model`'s trigger kinds."""
    if model in triggers.TRIGGER_MODELS:
        triggers.TRIGGER_MODELS = tuple(m for m in triggers.TRIGGER_MODELS if m is not model)
        rebuild_rule_models()


def register_guardrail_config(key: str, model: type[Document]) -> None:
    """Let a rule configure a guardrail under `guardrails: {key: ...}`, validated by `model`;
    ValueError if the key is taken."""
    if GUARDRAIL_CONFIGS.get(key) is model:
        return
    if key in GUARDRAIL_CONFIGS or key in Guardrails.model_fields:
        raise ValueError(f"guardrails.{key} is registered already")
    GUARDRAIL_CONFIGS[key] = model
    rebuild_rule_models()


def unregister_guardrail_config(key: str) -> None:
    """Rules may no longer configure `guardrails.{key}`."""
    if GUARDRAIL_CONFIGS.pop(key, None) is not None:
        rebuild_rule_models()


def rebuild_rule_models() -> None:
    """Build the step and trigger unions and the guardrails model again from the registries,
    and the models that hold them."""
    BuiltinExecution.model_fields["actions"].annotation = _list_of(action_union())
    BuiltinExecution.model_rebuild(force=True)
    Rule.model_fields["triggers"].annotation = _list_of(trigger_union())
    Rule.model_fields["guardrails"].annotation = _guardrails_model()
    Rule.model_rebuild(force=True)


def _guardrails_model() -> type[Guardrails]:
    """`Guardrails` with a field per registered guardrail configuration (None: not set)."""
    if not GUARDRAIL_CONFIGS:
        return Guardrails
    fields: dict[str, Any] = {key: (model | None, None) for key, model in GUARDRAIL_CONFIGS.items()}
    return create_model("Guardrails", __base__=Guardrails, __doc__=Guardrails.__doc__, **fields)


def _list_of(item: object) -> Any:
    """`list[item]` for an item type built at run time."""
    return GenericAlias(list, (item,))
