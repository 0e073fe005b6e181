"""Where each `ade-tasks` command lives, so that a command's module is imported only when it runs.

Importing every command module cost every command, `--version` included, the imports of all of
them (httpx, pydantic, the domain: about 1 s on the busy 2-core machine, bench/cli_startup.py).
The root group and the groups other modules extend (`rules`, `runs`) are `LazyGroup`s: a command
is looked up here and its module imported when it is invoked; help, which lists them all,
imports them all. A command this map lacks is still found, by importing every module of its
group, only slower (tests/unit/ade_api/cli/test_registry.py keeps the map complete). A new
command is its module plus one line here.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Mapping
from typing import Any

import click

#: Commands of `ade-tasks` defined outside `root`, by the module that defines them.
ROOT = {
    "actions": "ade_api.cli.actions",
    "api": "ade_api.cli.processes",
    "audit": "ade_api.cli.admin",
    "beat": "ade_api.cli.processes",
    "cleanups": "ade_api.cli.operations",
    "cron": "ade_api.cli.cron",
    "dev-model": "ade_api.cli.dev_model",
    "doctor": "ade_api.cli.doctor",
    "emit": "ade_api.cli.events",
    "events": "ade_api.cli.ingress_events",
    "hooks": "ade_api.cli.events",
    "inputs": "ade_api.cli.operations",
    "lanes": "ade_api.cli.operations",
    "poll": "ade_api.cli.poll",
    "providers": "ade_api.cli.providers",
    "relay": "ade_api.cli.relay",
    "review": "ade_api.cli.operations",
    "run": "ade_api.cli.runs",
    "settings": "ade_api.cli.providers",
    "tokens": "ade_api.cli.admin",
    "usage": "ade_api.cli.rules",
    "watch": "ade_api.cli.events",
    "worker": "ade_api.cli.processes",
}

#: Commands of `ade-tasks rules` defined outside `root`.
RULES = {
    "backfill": "ade_api.cli.backfill",
    **dict.fromkeys(
        ("create", "delete", "disable", "enable", "pause", "resume", "show", "update", "versions"),
        "ade_api.cli.rules",
    ),
    "push": "ade_api.cli.rule_push",
}

#: Commands of `ade-tasks runs` (all defined outside `root`).
RUNS = {
    **dict.fromkeys(("approve", "reject"), "ade_api.cli.operations"),
    **dict.fromkeys(("list", "page", "show"), "ade_api.cli.history"),
    "logs": "ade_api.cli.logs",
    **dict.fromkeys(
        ("cancel", "cancel-scheduled", "events", "retry", "scheduled"), "ade_api.cli.runs"
    ),
}

#: Commands that only call the API, by group: they are given the API address read alone
#: (ade_tasks/api_address.py), not the settings, whose pydantic models cost them a third of their
#: start-up. A command here takes an `ApiTarget`, not `Settings`.
ADDRESS_ONLY = {"runs": frozenset({"list"})}


class LazyGroup(click.Group):
    """A click group whose commands register themselves when their module is imported, which
    happens the first time one of them is asked for (`lazy_commands`: name -> module)."""

    def __init__(self, *args: Any, lazy_commands: Mapping[str, str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy_commands = dict(lazy_commands)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands:
            module = self.lazy_commands.get(cmd_name)
            self._import([module] if module else self.lazy_commands.values())
        return super().get_command(ctx, cmd_name)

    def list_commands(self, ctx: click.Context) -> list[str]:
        self._import(self.lazy_commands.values())
        return super().list_commands(ctx)

    @staticmethod
    def _import(modules: Iterable[str]) -> None:
        # Imports allocate many objects and free few: the cyclic collector would walk them
        # again and again (ade_tasks.rules.gc_pause), a fifth of a command's import time. Imported
        # here, not above: `--version` imports no domain module.
        from ade_tasks.rules.gc_pause import paused_gc

        with paused_gc():
            for module in dict.fromkeys(modules):  # each registers its commands on its groups
                importlib.import_module(module)
