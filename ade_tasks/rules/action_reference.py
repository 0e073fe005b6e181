"""What a rule's chain can call, described as data for `ade-tasks actions list` and
`GET /api/v1/actions`: the allow-listed `ade-action`s with their arguments and who may call them,
and the built-in step types with their fields.

Nothing here is a second list: the actions come from `rules.ade_actions.CATALOG` and their
argument models, the step types from `rules.steps.ACTION_MODELS`, and each argument's type,
default and limits from the pydantic model's JSON schema. A new action or step type shows up
here, in the API and in the CLI without an edit.

Who may call an `ade-action`: a rule acts as itself, never as the token that wrote it, so what
decides is where the rule came from (`RULE_ORIGINS`), not a token's role. An admin-only action
needs a rule from the cluster's rules directory (written by its administrators); any other
action may be called by any rule the cluster runs: a rules-directory file, a trusted shared
config file, or a rule created through the API (which itself needs an `admin` token).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, TypeAdapter
from pydantic.fields import FieldInfo

from ade_tasks.json_document import JsonObject
from ade_tasks.rules.ade_actions import CATALOG, AdeAction
from ade_tasks.rules.steps import ACTION_MODELS, Step

#: Where a rule can come from, and whether its `ade-action`s count as an administrator's
#: (the executor's `_require_admin` and the loader's `check_step(admin=...)` decide the same).
RULE_ORIGINS: Mapping[str, bool] = {
    "rules-dir": True,  # a file in ADE_RULES_DIR, outside its shared/ subdirectory
    "shared": False,  # a trusted file in ADE_RULES_DIR/shared (another team's config)
    "api": False,  # created with POST /api/v1/rules
}


@dataclass(frozen=True)
class Parameter:
    """One argument of an action or field of a step type."""

    name: str
    type: str
    required: bool
    default: object
    description: str
    limits: tuple[str, ...] = ()

    def as_dict(self) -> JsonObject:
        """A JSON-ready form."""
        return {
            "name": self.name,
            "type": self.type,
            "required": self.required,
            "default": self.default,
            "description": self.description,
            "limits": list(self.limits),
        }


@dataclass(frozen=True)
class ActionInfo:
    """One allow-listed `ade-action`: what it does, its arguments and which rules may call it."""

    name: str
    description: str
    arguments: tuple[Parameter, ...]
    admin_only: bool
    side_effect_free: bool
    secret_args: tuple[str, ...]
    rule_origins: tuple[str, ...]

    def as_dict(self) -> JsonObject:
        """A JSON-ready form."""
        return {
            "name": self.name,
            "description": self.description,
            "arguments": [argument.as_dict() for argument in self.arguments],
            "admin_only": self.admin_only,
            "side_effect_free": self.side_effect_free,
            "secret_args": list(self.secret_args),
            "rule_origins": list(self.rule_origins),
        }


@dataclass(frozen=True)
class StepTypeInfo:
    """One built-in step type: what it does and the fields it adds to every step's."""

    type: str
    description: str
    fields: tuple[Parameter, ...]

    def as_dict(self) -> JsonObject:
        """A JSON-ready form."""
        return {
            "type": self.type,
            "description": self.description,
            "fields": [field.as_dict() for field in self.fields],
        }


def catalog() -> JsonObject:
    """The whole reference as JSON-ready data (what `GET /api/v1/actions` answers)."""
    return {
        "ade_actions": [action.as_dict() for action in ade_actions()],
        "step_types": [step.as_dict() for step in step_types()],
        "common_step_fields": [field.as_dict() for field in common_step_fields()],
        "rule_origins": dict(RULE_ORIGINS),
    }


def ade_actions() -> list[ActionInfo]:
    """Every allow-listed `ade-action`, by name."""
    return [_action(spec) for _, spec in sorted(CATALOG.items())]


def common_step_fields() -> list[Parameter]:
    """The fields every step has, whatever its type (`id`, `condition`, `retry`, ...)."""
    return describe_model(Step)


def step_types() -> list[StepTypeInfo]:
    """Every built-in step type in the order rules list them, with the fields of its own (and
    the common fields whose default it changes)."""
    common = {field.name: field for field in common_step_fields()}
    found = []
    for name, model in ACTION_MODELS.items():
        own = tuple(
            field
            for field in describe_model(model, skip=("type",))
            if common.get(field.name) != field
        )
        found.append(StepTypeInfo(name, _first_line(model.__doc__), own))
    return found


def describe_model(model: type[BaseModel], skip: tuple[str, ...] = ()) -> list[Parameter]:
    """The fields of `model` as its JSON schema states them, in declaration order."""
    schema = model.model_json_schema()
    required = set(schema.get("required", ()))
    definitions = schema.get("$defs", {})
    fields = []
    for name, info in model.model_fields.items():
        key = info.alias or name
        if key in skip:
            continue
        prop = schema["properties"][key]
        fields.append(
            Parameter(
                name=key,
                type=_type_name(prop, definitions),
                required=key in required,
                default=_default(info),
                description=info.description or "",
                limits=tuple(_limits(_without_null(prop))),
            )
        )
    return fields


def _action(spec: AdeAction) -> ActionInfo:
    origins = tuple(
        origin for origin, admin in RULE_ORIGINS.items() if admin or not spec.admin_only
    )
    return ActionInfo(
        name=spec.name,
        description=spec.description,
        arguments=tuple(describe_model(spec.args)),
        admin_only=spec.admin_only,
        side_effect_free=spec.side_effect_free,
        secret_args=spec.secret_args,
        rule_origins=origins,
    )


def _default(info: FieldInfo) -> object:
    """The field's default as JSON (a `default_factory` called, a model dumped); None when
    the field is required."""
    if info.is_required():
        return None
    value = info.get_default(call_default_factory=True, validated_data={})
    return TypeAdapter(Any).dump_python(value, mode="json")


def _first_line(doc: str | None) -> str:
    return " ".join((doc or "").strip().split("\n\n", 1)[0].split())


def _without_null(prop: JsonObject) -> JsonObject:
    """The non-null branch of an optional property (`X | None`), else the property itself."""
    branches = [b for b in prop.get("anyOf", ()) if b.get("type") != "null"]
    return branches[0] if len(branches) == 1 else prop


def _type_name(prop: JsonObject, definitions: JsonObject) -> str:
    """A JSON schema type in words: `string`, `list of string`, `one of: a, b`, `ToolPolicy`."""
    if "anyOf" in prop:  # `null` is left out: `required` and `default` say a field may be unset
        names = [_type_name(b, definitions) for b in prop["anyOf"] if b.get("type") != "null"]
        return " or ".join(dict.fromkeys(names))
    if "enum" in prop:
        return "one of " + "|".join(str(value) for value in prop["enum"])
    if "$ref" in prop:
        return str(prop["$ref"].rsplit("/", 1)[-1])
    kind = prop.get("type", "any")
    if kind == "array":
        return "list of " + _type_name(prop.get("items", {}), definitions)
    if kind == "object" and isinstance(prop.get("additionalProperties"), dict):
        return "map of string to " + _type_name(prop["additionalProperties"], definitions)
    return str(kind)


_LIMIT_WORDS = (
    ("minLength", "at least {} characters"),
    ("maxLength", "at most {} characters"),
    ("minimum", ">= {}"),
    ("exclusiveMinimum", "> {}"),
    ("maximum", "<= {}"),
    ("minItems", "at least {} items"),
    ("maxItems", "at most {} items"),
    ("pattern", "matches {}"),
)


def _limits(prop: JsonObject) -> list[str]:
    found = [
        "not empty" if (key, prop[key]) == ("minLength", 1) else words.format(prop[key])
        for key, words in _LIMIT_WORDS
        if key in prop
    ]
    items = prop.get("items")
    if isinstance(items, dict):
        found += [f"each {limit}" for limit in _limits(items)]
    return found
