"""Custom webhook triggers: a delivery to hook `<hook>` (stored with source `webhook:<hook>`)
starts a webhook trigger of that hook whose `filters` (JSON path -> value, each an equality)
all hold for the delivery's body."""

from __future__ import annotations

from collections.abc import Mapping

from ade_tasks.hooks.config import JsonFilter, filters_match
from ade_tasks.rules.rule import Rule
from ade_tasks.rules.triggers import Trigger, WebhookTrigger
from ade_tasks.triggers.matcher import Refusal, TriggerTest

SOURCE_PREFIX = "webhook:"


def hook_keys(source: str, _payload: Mapping[str, object], /) -> tuple[str, ...]:
    """The hook a delivery came to (none: it came to no custom hook)."""
    return (source.removeprefix(SOURCE_PREFIX),) if source.startswith(SOURCE_PREFIX) else ()


def webhook_matcher(source: str, payload: Mapping[str, object], /) -> TriggerTest:
    """Webhook triggers against a stored delivery. A source that names no hook (not
    `webhook:<hook>`) is no custom hook's delivery, so it starts none."""
    hook = source.removeprefix(SOURCE_PREFIX) if source.startswith(SOURCE_PREFIX) else None
    body = payload.get("body")

    def match(_rule: Rule, trigger: Trigger) -> Refusal | None:
        assert isinstance(trigger, WebhookTrigger)
        if hook is None:
            return Refusal("hook", f"the event came from {source}, not from a custom hook")
        if trigger.hook != hook:
            return Refusal("hook", f"the delivery came to hook {hook}, not {trigger.hook}")
        filters = [
            JsonFilter(path=path, op="equals", value=value)
            for path, value in trigger.filters.items()
        ]
        admitted, why = filters_match(filters, body)
        return None if admitted else Refusal("filters", str(why))

    return match
