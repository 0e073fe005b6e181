"""The `ade-tasks` command line: an edge that wires settings, database, Celery and the API.

`base` holds the root group and what every command shares; each other module attaches one
group of commands to it (actions, rules, rule_push, runs, logs, history, events, ingress_events,
operations, admin, backfill, cron, doctor, poll, providers, relay) and imports only `base` and
the domain, never another command module. Importing this package registers every command on `main`.
"""

from ade_api.cli import (  # noqa: F401  (each registers its commands on `main`)
    actions,
    admin,
    backfill,
    cron,
    doctor,
    events,
    history,
    ingress_events,
    logs,
    operations,
    poll,
    providers,
    relay,
    rule_push,
    rules,
    runs,
)
from ade_api.cli.base import main

__all__ = ["main"]
