"""Typed inputs of manual runs: coerce `k=v` strings, apply defaults, refuse undeclared ones."""

from __future__ import annotations

from typing import Any

from ade_tasks.errors import InvalidInputError
from ade_tasks.json_document import JsonObject
from ade_tasks.rules.outputs import FALSE_WORDS, TRUE_WORDS, InputSpec
from ade_tasks.rules.rule import Rule


def _coerce(name: str, spec: InputSpec, value: Any) -> Any:
    if spec.type == "boolean":
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in TRUE_WORDS | FALSE_WORDS:
            return text in TRUE_WORDS
        raise InvalidInputError(f"input {name!r} must be a boolean (true/false), got {value!r}")
    if spec.type == "number":
        if isinstance(value, int | float) and not isinstance(value, bool):
            return value
        try:
            number = float(str(value))
        except ValueError:
            raise InvalidInputError(f"input {name!r} must be a number, got {value!r}") from None
        return int(number) if number.is_integer() else number
    text = str(value)
    if spec.type == "choice" and text not in spec.options:
        raise InvalidInputError(
            f"input {name!r} must be one of {', '.join(spec.options)}; got {value!r}"
        )
    return text


def resolve_inputs(rule: Rule, given: JsonObject) -> JsonObject:
    """The inputs of a manual run, typed and completed with defaults.

    A rule that declares no inputs accepts any string inputs as they are (exposed as
    `{{trigger.inputs.<name>}}`); a rule that declares inputs accepts only those.
    """
    if not rule.inputs:
        return {str(k): v for k, v in given.items()}
    unknown = sorted(set(given) - set(rule.inputs))
    if unknown:
        raise InvalidInputError(
            f"rule {rule.id!r} has no input named {', '.join(map(repr, unknown))}; "
            f"declared inputs: {', '.join(sorted(rule.inputs))}"
        )
    resolved: JsonObject = {}
    for name, spec in rule.inputs.items():
        if name in given:
            resolved[name] = _coerce(name, spec, given[name])
        elif spec.default is not None:
            resolved[name] = _coerce(name, spec, spec.default)
        elif spec.required:
            raise InvalidInputError(
                f"rule {rule.id!r} requires input {name!r}; pass --input {name}=..."
            )
    return resolved
