"""A rule's concurrency key: `concurrency: {key: "pr-{{trigger.repo}}#{{trigger.number}}",
on_new: queue|skip|supersede}`.

The key is rendered at dispatch from the trigger (and the rule's fields), so runs of the same
rule with the same key are serialized and runs with other keys are not: per key what
`guardrails.overlap` is per rule. `on_new` says what a new trigger does while a run of the same
key is active: wait for it (`queue`), be recorded `skipped` (`skip`), or cancel it and start
(`supersede`, GitHub's cancel-in-progress per key). Enforced by `ade_tasks.runs.concurrency_keys`.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from pydantic import Field, field_validator

from ade_tasks.errors import AdmissionError
from ade_tasks.rules.document import Document
from ade_tasks.templating import (
    TemplateContext,
    TemplateError,
    check,
    lookup,
    render,
    to_text,
    variables,
)

#: Longest rendered key: a key names a pull request or a branch, not a document.
MAX_KEY = 200
#: What a key may refer to: the trigger and the rule (it is rendered before any step ran).
KEY_ROOTS = ("trigger", "rule", "date", "time")


class OnNew(StrEnum):
    """What a new trigger does while a run of the same rule and key is active."""

    QUEUE = "queue"
    SKIP = "skip"
    SUPERSEDE = "supersede"


class Concurrency(Document):
    """Serialize a rule's runs per key rendered from their trigger."""

    key: str = Field(min_length=1, max_length=500)
    on_new: OnNew = OnNew.QUEUE

    @field_validator("key")
    @classmethod
    def _key_renders(cls, value: str) -> str:
        problems = check(value, earlier_steps=[], where="concurrency.key")
        steps = [name for name in variables(value) if name.split(".")[0] not in KEY_ROOTS]
        if steps:
            problems.append(
                f"concurrency.key: {steps[0]} is not known when the run is dispatched; a key "
                "refers to trigger.<field> and rule.<field> only"
            )
        if problems:
            raise ValueError("; ".join(p.removeprefix("concurrency.key: ") for p in problems))
        return value


def render_key(
    concurrency: Concurrency, rule: Mapping[str, Any], trigger: Mapping[str, Any], now: Any
) -> str:
    """The run's key; AdmissionError (the trigger is refused, no run) when the trigger lacks a
    field the key names, a field it names is empty, or the key renders empty or too long."""
    template = concurrency.key
    where = f"rule {rule['id']!r}: concurrency.key {template!r}"
    context = TemplateContext(trigger=trigger, steps={}, rule=rule, now=now)
    try:
        key = render(template, context, where)
        empty = [
            name
            for name in variables(template)
            if not to_text(lookup(name, context, where)).strip()
        ]
    except TemplateError as exc:
        raise AdmissionError(f"{exc.message}; this trigger cannot run the rule") from None
    if empty or not key.strip():
        named = f" ({', '.join(empty)} is empty)" if empty else ""
        raise AdmissionError(
            f"{where} renders empty for this trigger{named}; the run is refused, since "
            "an empty key would serialize it with unrelated runs. Name fields every trigger "
            "of the rule carries (e.g. trigger.number for pull-request triggers)"
        )
    if len(key) > MAX_KEY:
        raise AdmissionError(
            f"{where} renders {len(key)} characters for this trigger (at most {MAX_KEY}); "
            "build the key from short fields (a number, a branch, the repository)"
        )
    return key
