"""Which routes an event of a rule goes to: the routes in settings, narrowed by the rule's
`notify:` (`ade_tasks.rules.notify`)."""

from __future__ import annotations

from collections.abc import Mapping

from ade_tasks.rules.notify import NotificationEvent, NotifyPolicy
from ade_tasks.settings import NotificationRoute


def routes_for(
    event: NotificationEvent,
    policy: NotifyPolicy | None,
    routes: Mapping[str, NotificationRoute],
) -> list[str]:
    """The routes `event` goes to: every route that takes the event, narrowed to the rule's
    `routes` and `events` when it names them; none under `notify: off`. A route the rule
    names that the settings do not configure is skipped (`unknown_routes` tells)."""
    if policy is None:
        names = sorted(routes)
    elif not policy.enabled or (policy.events and event not in policy.events):
        return []
    else:
        names = policy.routes or sorted(routes)
    return [name for name in names if name in routes and event in routes[name].events]


def unknown_routes(
    policy: NotifyPolicy | None, routes: Mapping[str, NotificationRoute]
) -> list[str]:
    """The routes a rule's `notify:` names that `routes` does not configure."""
    if policy is None:
        return []
    return [name for name in policy.routes if name not in routes]
