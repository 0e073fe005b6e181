"""What is wrong with a rule document, in the project's words: pydantic's validation errors
turned into one `field: reason` per problem, each saying what was wrong and what to write.

Pydantic reports a value that fits no member of a plain union (`command: str | list[str]`) once
per member; those become one problem ("must be a string or a list"), or, when the value has
the shape of one member (a list), that member's own problems only.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sized

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from ade_tasks.rules.document import PATTERN_HINTS
from ade_tasks.rules.steps import known_action_types
from ade_tasks.rules.triggers import known_trigger_types

# Discriminator tags pydantic puts into error locations; users never wrote them as fields.
_UNION_TAGS = frozenset({"built-in", "agent-session"})
# Location parts naming a member of a plain union: `str`, `list[str]`, `dict[str,any]`.
_MEMBER = re.compile(r"^(str|int|float|bool|none|[a-z]+\[.*\])$")
_KINDS = {
    "string_type": "a string",
    "list_type": "a list",
    "dict_type": "a mapping (key: value)",
    "model_type": "a mapping (field: value)",
    "model_attributes_type": "a mapping (field: value)",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "int_type": "a whole number",
    "int_parsing": "a whole number",
    "int_from_float": "a whole number",
    "float_type": "a number",
    "float_parsing": "a number",
    "none_required": "null",
}
_BOUNDS = {
    "greater_than": ("gt", "greater than"),
    "greater_than_equal": ("ge", "at least"),
    "less_than": ("lt", "less than"),
    "less_than_equal": ("le", "at most"),
}


def field_path(loc: Iterable[int | str]) -> str:
    """An error location as the dotted field a user wrote, e.g. `triggers.0.cron`."""
    parts = [str(p) for p in loc if not (isinstance(p, str) and _internal(p))]
    return ".".join(parts) or "(document)"


def problems_of(exc: ValidationError) -> list[tuple[str, str]]:
    """Each problem of a failed validation as (field path, reason), in document order."""
    # Errors of one plain union are gathered at the place of the first of them.
    entries: list[ErrorDetails | tuple[int | str, ...]] = []
    unions: dict[tuple[int | str, ...], list[ErrorDetails]] = {}
    for error in exc.errors(include_url=False):
        loc = tuple(error["loc"])
        member = next((i for i, part in enumerate(loc) if _is_member(part)), None)
        if member is None:
            entries.append(error)
            continue
        key = loc[:member]
        if key not in unions:
            unions[key] = []
            entries.append(key)
        unions[key].append(error)
    problems: list[tuple[str, str]] = []
    for entry in entries:
        if isinstance(entry, tuple):
            problems += _union_problems(unions[entry])
        else:
            problems.append((field_path(entry["loc"]), describe(entry)))
    return problems


def describe(error: ErrorDetails) -> str:
    """One pydantic error as a reason a rule author can act on."""
    kind, ctx, value = error["type"], error.get("ctx") or {}, error["input"]
    if kind == "missing":
        name = error["loc"][-1] if error["loc"] else ""
        return f"required; add `{name}:`" if isinstance(name, str) else "required; add it"
    if kind == "extra_forbidden":
        return "unknown field; remove it or check its spelling"
    if kind in _KINDS:
        hint = ""
        if kind == "list_type" and isinstance(value, dict):
            hint = "; write the items as `- item` lines or in [ ]"
        return f"must be {_KINDS[kind]}, not {_shown(value)}{hint}"
    if kind == "string_pattern_mismatch":
        hint = PATTERN_HINTS.get(ctx.get("pattern", ""), "check the documented form")
        return f"{value!r} is not valid here; {hint}"
    if kind in ("literal_error", "enum"):
        shown = repr(value) if isinstance(value, str) else _shown(value)
        return f"{shown} is not allowed; use one of {ctx.get('expected', '')}"
    if kind in _BOUNDS:
        name, words = _BOUNDS[kind]
        return f"must be {words} {_number(ctx.get(name))}, not {_shown(value)}"
    if kind == "string_too_short":
        return "must not be empty"
    if kind == "string_too_long":
        return f"is longer than {ctx.get('max_length')} characters; shorten it"
    if kind in ("too_short", "too_long"):
        bound = ctx.get("min_length" if kind == "too_short" else "max_length")
        words = "at least" if kind == "too_short" else "at most"
        return f"must hold {words} {bound} item{'s' if bound != 1 else ''}, not {_count(value)}"
    if kind == "union_tag_invalid":
        field = str(ctx.get("discriminator", "")).strip("'")
        return f"{field} {ctx.get('tag')!r} is not known; use one of {ctx.get('expected_tags')}"
    if kind == "union_tag_not_found":
        field = str(ctx.get("discriminator", "")).strip("'")
        return f"has no {field}; add `{field}:` saying which kind of entry this is"
    if kind == "finite_number":
        return f"must be a finite number, not {_shown(value)}"
    if kind in ("value_error", "assertion_error"):
        # Raised by our own validators, whose messages already say what to do.
        return str(error["msg"]).removeprefix("Value error, ").removeprefix("Assertion failed, ")
    # A kind this module does not know yet: keep pydantic's text, marked as such.
    return f"is not valid (pydantic: {error['msg']})"


def _union_problems(errors: list[ErrorDetails]) -> list[tuple[str, str]]:
    """The problems of a value that fits no member of a plain union."""
    deeper = [e for e in errors if not _is_member(e["loc"][-1])]
    if deeper:  # the value had a member's shape (a list): report what is wrong inside it
        return [(field_path(e["loc"]), describe(e)) for e in deeper]
    kinds = list(dict.fromkeys(_KINDS.get(e["type"], "") for e in errors))
    if "" in kinds:  # a member refused the value for another reason: report each
        return [(field_path(e["loc"]), describe(e)) for e in errors]
    path = field_path(errors[0]["loc"])
    listed = " or ".join(kinds) if len(kinds) < 3 else ", ".join(kinds[:-1]) + ", or " + kinds[-1]
    return [(path, f"must be {listed}, not {_shown(errors[0]['input'])}")]


def _internal(part: str) -> bool:
    return (
        part in _UNION_TAGS
        or part in known_action_types()
        or part in known_trigger_types()
        or part.startswith("function-")
        or _is_member(part)
    )


def _is_member(part: int | str) -> bool:
    return isinstance(part, str) and bool(_MEMBER.match(part))


def _shown(value: object) -> str:
    """A value as its YAML kind and, when short, itself."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    text = repr(value)
    if isinstance(value, str):
        return f"the string {text}" if len(text) <= 40 else "a long string"
    return text if len(text) <= 40 else "a long number"


def _number(value: object) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _count(value: object) -> str:
    return str(len(value)) if isinstance(value, Sized) else _shown(value)
