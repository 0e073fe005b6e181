"""A stored rule as the pages read it: its document (or None when this version cannot read it,
so a page shows the row instead of a 500), whether an operator may run it by hand, its
trigger types in words."""

from __future__ import annotations

import logging

from ade_tasks.db import rules as rules_db
from ade_tasks.db.schema import RuleRow
from ade_tasks.errors import InvalidInputError
from ade_tasks.rules.rule import Rule
from ade_tasks.rules.triggers import ManualTrigger

log = logging.getLogger(__name__)


def stored_rule(row: RuleRow) -> Rule | None:
    """The rule a row holds, or None when its stored document cannot be read (logged)."""
    try:
        return rules_db.load_rule(row)
    except Exception:  # a stored document this version cannot read: show the row, not a 500
        log.exception("web page: could not load rule %s", row.id)
        return None


def has_manual_trigger(rule: Rule) -> bool:
    """May an operator start the rule by hand? Only with a `manual` trigger: a rule triggered
    by a webhook expects that event's variables (`trigger.number`, ...) and would fail."""
    return any(isinstance(trigger, ManualTrigger) for trigger in rule.triggers)


def trigger_types(rule: Rule) -> str:
    """The rule's trigger types, comma-separated."""
    return ", ".join(str(getattr(t, "type", "?")) for t in rule.triggers)


def no_manual_trigger(rule: Rule) -> InvalidInputError:
    """The refusal of a manual run of a rule without a manual trigger."""
    return InvalidInputError(
        f"rule {rule.id!r} has no manual trigger, so it cannot be run by hand (its triggers: "
        f"{trigger_types(rule)}); add `- type: manual` to its triggers to allow it"
    )
