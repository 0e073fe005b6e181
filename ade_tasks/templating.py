"""Step-argument templates: `{{trigger.number}}`, `{{steps.<id>.output}}`, `{{rule.name}}`, ...

One lookup implementation serves rendering here and step conditions (`ade_tasks.rules.conditions`);
one name check serves the load-time checks of both. There are no filters, expressions or
escapes: a `{{` that is not a variable reference is an error, never literal text.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeAlias, TypeVar, cast

from ade_tasks.errors import AdeError

_T = TypeVar("_T")  # a value and its rendered copy have one shape

ROOTS = ("trigger", "steps", "rule", "date", "time")
STEP_ATTRIBUTES = ("output", "status", "exit_code", "result")
RULE_FIELDS = ("id", "name", "description", "project", "billing_code")
# Segments after the first may start with a digit: step ids may, and list items are indexed.
NAME_PATTERN = r"[A-Za-z_][A-Za-z0-9_-]*(?:\.[A-Za-z0-9_-]+)*"
_REFERENCE = re.compile(r"\{\{\s*(" + NAME_PATTERN + r")\s*\}\}")
_USAGE = "write {{trigger.<field>}}, {{steps.<id>.output}}, {{rule.name}}, {{date}} or {{time}}"


#: The trigger fields a rule's triggers provide, as a tree: a field maps to the fields under it,
#: or to None when what lies below is open-ended (a webhook's body) or not a mapping.
TriggerFields: TypeAlias = Mapping[str, "TriggerFields | None"]


class TemplateError(AdeError):
    """A template refers to a variable that does not exist or is malformed."""


@dataclass(frozen=True, slots=True)
class TemplateContext:
    """What templates and conditions of one run can read: trigger, earlier steps, rule, time."""

    trigger: Mapping[str, object]
    steps: Mapping[str, Mapping[str, object]]
    rule: Mapping[str, object]
    now: datetime

    def __post_init__(self) -> None:
        if self.now.tzinfo is None or self.now.utcoffset() is None:
            raise TemplateError(
                f"TemplateContext.now {self.now.isoformat()} is naive; pass datetime.now(UTC)"
            )


def render(
    text: str,
    context: TemplateContext,
    where: str,
    *,
    escape: Callable[[str], str] | None = None,
    escape_named: Callable[[str, str], str] | None = None,
) -> str:
    """`text` with every `{{variable}}` replaced (through `escape`, e.g. shlex.quote, if given;
    `escape_named(name, value)` when the treatment depends on the variable)."""
    if "{{" not in text:
        return text
    references, malformed = _scan(text)
    if malformed:
        raise TemplateError(f"{where}: malformed template {malformed[0]!r}; {_USAGE}")
    parts: list[str] = []
    last = 0
    # Substituted values are never scanned again, so trigger data cannot inject a reference.
    for match in references:
        value = to_text(lookup(match.group(1), context, where))
        if escape_named is not None:
            value = escape_named(match.group(1), value)
        elif escape is not None:
            value = escape(value)
        parts += [text[last : match.start()], value]
        last = match.end()
    parts.append(text[last:])
    return "".join(parts)


def render_value(
    value: _T, context: TemplateContext, where: str, *, escape: Callable[[str], str] | None = None
) -> _T:
    """`value` with every string inside its dicts and lists rendered; other types unchanged."""
    rendered: object
    if isinstance(value, str):
        rendered = render(value, context, where, escape=escape)
    elif isinstance(value, Mapping):
        rendered = {
            key: render_value(item, context, f"{where}.{key}", escape=escape)
            for key, item in value.items()
        }
    elif isinstance(value, list):
        rendered = [
            render_value(item, context, f"{where}[{i}]", escape=escape)
            for i, item in enumerate(value)
        ]
    else:
        return value
    return cast(_T, rendered)  # the same shape: a string for each string


def variables(text: str) -> list[str]:
    """The variable names `text` refers to, each once, in order of first use."""
    return list(dict.fromkeys(match.group(1) for match in _scan(text)[0]))


def check(
    text: str,
    *,
    earlier_steps: Sequence[str],
    where: str,
    trigger_fields: TriggerFields | None = None,
) -> list[str]:
    """Load-time problems of the template `text`; empty when it can render."""
    references, malformed = _scan(text)
    problems = [f"{where}: malformed template {fragment!r}; {_USAGE}" for fragment in malformed]
    for name in dict.fromkeys(match.group(1) for match in references):
        problems += check_name(name, earlier_steps, where, trigger_fields)
    return problems


def check_name(
    name: str,
    earlier_steps: Sequence[str],
    where: str,
    trigger_fields: TriggerFields | None = None,
) -> list[str]:
    """Problems of one variable name that are knowable before the run; trigger paths are
    checked against `trigger_fields` when the caller knows them (`ade_tasks.rules.references`)."""
    root, *path = name.split(".")
    hint = ""
    if root not in ROOTS:
        hint = f"variables start with {', '.join(ROOTS)}"
    elif root in ("date", "time") and path:
        hint = f"{root} has no fields; write {{{{{root}}}}}"
    elif root == "trigger" and not path:
        hint = "name a trigger field, e.g. trigger.number"
    elif root == "trigger" and trigger_fields is not None:
        hint = _trigger_hint(path, trigger_fields)
    elif root == "rule" and (len(path) != 1 or path[0] not in RULE_FIELDS):
        hint = f"rule fields: {', '.join(RULE_FIELDS)}"
    elif root == "steps" and not path:
        hint = "name a step and an attribute, e.g. steps.<id>.output"
    elif root == "steps":
        step_id, attribute = _split_step(path, earlier_steps)
        if step_id not in earlier_steps:
            hint = (
                f"step {step_id!r} is not an earlier step; earlier steps: {_listing(earlier_steps)}"
            )
        elif (
            not attribute
            or attribute[0] not in STEP_ATTRIBUTES
            or (attribute[0] != "result" and len(attribute) > 1)
        ):
            hint = f"step attributes: {', '.join(STEP_ATTRIBUTES)} (result.<field>)"
    return [f"{where}: unknown variable {name}; {hint}"] if hint else []


def _trigger_hint(path: Sequence[str], fields: TriggerFields) -> str:
    """Why `trigger.<path>` names nothing the trigger provides ("" when it may), with the
    fields there are and the likeliest one meant."""
    level: TriggerFields | None = fields
    label = "trigger"
    for segment in path:
        if level is None:
            return ""  # open-ended below here: only the run can tell
        if segment not in level:
            known = list(level)
            close = difflib.get_close_matches(segment, known, n=1, cutoff=0.6)
            meant = f"; did you mean {label}.{close[0]}?" if close else ""
            return f"the rule's triggers give {label} no field {segment!r}{meant} ({label} " \
                f"fields: {_listing(known)})"  # fmt: skip
        level = level[segment]
        label = f"{label}.{segment}"
    return ""


def lookup(name: str, context: TemplateContext, where: str) -> Any:
    """The value of variable `name` in `context`; TemplateError if it does not exist."""
    problems = check_name(name, list(context.steps), where)
    if problems:
        raise TemplateError(problems[0])
    root, *path = name.split(".")
    if root in ("date", "time"):
        return context.now.astimezone(UTC).strftime("%Y-%m-%d" if root == "date" else "%H:%M")
    if root == "steps":
        step_id, attribute = _split_step(path, list(context.steps))
        return _walk(context.steps[step_id], attribute, f"steps.{step_id}", name, where)
    return _walk(context.trigger if root == "trigger" else context.rule, path, root, name, where)


def to_text(value: object) -> str:
    """How a value reads inside rendered text: null empty, JSON booleans, compact JSON."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Mapping | list | tuple):
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=_json_default)
    return str(value)


def kind_of(value: object) -> str:
    """The condition-language name of a value's type: null, bool, number, string, object, list."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, Mapping):
        return "object"
    return "list" if isinstance(value, list | tuple) else type(value).__name__


def _json_default(value: object) -> object:
    if isinstance(value, Mapping):
        return dict(value)
    return value.isoformat() if isinstance(value, datetime) else str(value)


def _walk(value: Any, path: Sequence[str], label: str, name: str, where: str) -> Any:
    for segment in path:
        if isinstance(value, Mapping) and segment in value:
            value = value[segment]
        elif isinstance(value, Mapping):
            hint = f"available {label} fields: {_listing(list(value))}"
            raise TemplateError(f"{where}: unknown variable {name}; {hint}")
        elif isinstance(value, list | tuple) and segment.isdigit() and int(segment) < len(value):
            value = value[int(segment)]
        else:
            kind = kind_of(value)
            size = f" of {len(value)} items" if kind == "list" else ""
            described = "null" if kind == "null" else f"a {kind}{size}"
            hint = f"{label} is {described}, it has no field {segment!r}"
            raise TemplateError(f"{where}: unknown variable {name}; {hint}")
        label = f"{label}.{segment}"
    return value


def _split_step(path: Sequence[str], step_ids: Sequence[str]) -> tuple[str, list[str]]:
    # Step ids may contain dots, so the longest known id wins: steps.build.web.output.
    for end in range(len(path), 1, -1):
        if ".".join(path[:end]) in step_ids:
            return ".".join(path[:end]), list(path[end:])
    return (path[0], list(path[1:])) if path else ("", [])


def _scan(text: str) -> tuple[list[re.Match[str]], list[str]]:
    references: list[re.Match[str]] = []
    malformed: list[str] = []
    start = text.find("{{")
    while start != -1:
        match = _REFERENCE.match(text, start)
        if match:
            references.append(match)
            start = text.find("{{", match.end())
        else:
            close = text.find("}}", start, start + 60)
            malformed.append(text[start : close + 2] if close != -1 else text[start : start + 30])
            start = text.find("{{", start + 2)
    return references, malformed


def _listing(names: Sequence[str]) -> str:
    ordered = sorted(map(str, names))
    more = f", ... ({len(ordered) - 20} more)" if len(ordered) > 20 else ""
    return ", ".join(ordered[:20]) + more if ordered else "none"
