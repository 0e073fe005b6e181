"""Cluster notifications as a rule sees them: the events that notify (`NotificationEvent`) and a
rule's own choice of routes and events (`notify:`), over the routes the cluster's settings name
(`ADE_NOTIFICATIONS__ROUTES__<name>__URL`, `ade_tasks.settings.NotificationSettings`).

Without `notify:` a rule's events go to every route that takes them. `notify: off` (YAML's
false; stored as `enabled: false`) sends none of them anywhere. `notify: {routes: [...],
events: [...]}` narrows: `routes` picks routes by name (default: all), `events` picks which of
the rule's events notify (default: all); a route still gets only the events it takes. How an
event reaches a route: `ade_tasks.notifications`.
"""

from __future__ import annotations

import re
from enum import StrEnum

from pydantic import Field, field_validator

from ade_tasks.rules.document import SLUG, Document


class NotificationEvent(StrEnum):
    """What a cluster notifies of (wire values, as written in settings and rules)."""

    RUN_FAILED = "run.failed"
    RUN_TIMED_OUT = "run.timed_out"
    APPROVAL_WAITING = "approval.waiting"
    QUESTION_WAITING = "question.waiting"
    RULE_HEALTH_CHANGED = "rule.health_changed"
    OCCURRENCE_MISSED = "occurrence.missed"


class NotifyPolicy(Document):
    """A rule's `notify:` block: which routes its events go to and which events notify."""

    #: False (`notify: off`): none of the rule's events notify.
    enabled: bool = True
    #: Route names from the cluster's settings; empty: every route.
    routes: list[str] = Field(default_factory=list)
    #: The rule's events that notify; empty: each route's own events.
    events: list[NotificationEvent] = Field(default_factory=list)

    @field_validator("routes")
    @classmethod
    def _route_names(cls, routes: list[str]) -> list[str]:
        for name in routes:
            if not re.fullmatch(SLUG, name):
                raise ValueError(
                    f"{name!r} is no route name (lower-case letters, digits, '-', '_', '.'); "
                    "name a route of the settings' ADE_NOTIFICATIONS__ROUTES"
                )
        return routes
