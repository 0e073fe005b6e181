"""The `ade-tasks` command line: an edge that wires settings, database, Celery and the API.

`root` holds the root group and what every command shares; each other module attaches one
group of commands to it (actions, rules, rule_push, runs, logs, history, events, ingress_events,
operations, admin, backfill, cron, doctor, poll, providers, relay, processes) and imports only
`root`, the shared modules that are no command's (run_stream, step_lines, plain_http, health) and
the domain, never another command module. `registry` says which module holds which command: a
module is imported when one of its commands runs (or help lists them all), not with this package.
"""

from ade_api.cli.root import main

__all__ = ["main"]
