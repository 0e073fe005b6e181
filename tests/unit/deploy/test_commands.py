"""Every command a deploy file runs exists in the CLI with the options it passes: `ade-tasks`
commands as click parses them, the Celery options `ade-tasks worker` / `beat` pass on, and
`celery -A` invocations (worker, beat, Flower).
"""

from __future__ import annotations

import importlib

import click
import pytest

from tests.unit.deploy.command_lines import (
    CELERY_APP_MODULE,
    PASSTHROUGH,
    _option_names,
    celery_invocation,
    flower_option_values,
    resolve_cli,
)
from tests.unit.deploy.deploy_files import Command, all_commands

# Celery subcommands a deploy file may run directly (everything else goes through ade-tasks).
CELERY_SUBCOMMANDS = {"worker", "beat", "flower"}


def check_passthrough(celery_command: click.Command, args: list[str], where: str) -> None:
    options = _option_names(celery_command)
    i = 0
    while i < len(args):
        token = args[i]
        i += 1
        if not token.startswith("-"):
            raise AssertionError(f"{where}: unexpected argument {token!r}")
        name = token.split("=", 1)[0]
        option = options.get(name)
        assert option is not None, f"{where}: celery {celery_command.name} has no option {name}"
        if not option.is_flag and "=" not in token:
            i += 1


def check_ade_command(command: Command) -> None:
    leaf, path, rest, parent = resolve_cli(command.argv[1:])
    where = f"{command.source}: `ade-tasks {' '.join(path)}`"
    try:  # click parses the options as the real command would: names, types and ranges
        ctx = leaf.make_context(path[-1], list(rest), parent=parent, resilient_parsing=False)
    except click.ClickException as exc:
        raise AssertionError(f"{where}: {exc.format_message()}") from exc
    if path[-1] in PASSTHROUGH and ctx.params.get("celery_args"):
        check_passthrough(PASSTHROUGH[path[-1]], list(ctx.params["celery_args"]), where)


def check_celery_command(command: Command) -> None:
    app, sub, args = celery_invocation(command.argv)
    assert app == CELERY_APP_MODULE, f"{command.source}: celery -A {app!r}"
    module = importlib.import_module(app)
    assert callable(getattr(module, "create_celery_app", None))
    assert sub in CELERY_SUBCOMMANDS, f"{command.source}: celery {sub}"
    if sub == "flower":
        flower_option_values(args)
    else:
        check_passthrough(PASSTHROUGH[sub], args, command.source)


def test_every_command_exists_with_its_options() -> None:
    for command in all_commands():
        if command.program == "ade-tasks":
            check_ade_command(command)
        elif command.program == "celery":
            check_celery_command(command)


def test_the_command_checks_can_fail() -> None:
    def ade(*argv: str) -> Command:
        return Command("probe", ["ade-tasks", *argv])

    for bad in (
        ade("workers"),
        ade("db", "migrate"),
        ade("api", "--port", "high"),
        ade("api", "--threads", "2"),
        ade("worker", "--loglevl", "INFO"),
    ):
        with pytest.raises(AssertionError):
            check_ade_command(bad)
    check_ade_command(ade("worker", "-Q", "ade.agent", "-c", "1", "-n", "a@%h", "-l", "INFO"))
    with pytest.raises(AssertionError):
        check_celery_command(Command("probe", ["celery", "-A", "ade_workers.app", "worker"]))
    with pytest.raises(AssertionError):
        check_celery_command(
            Command("probe", ["celery", "-A", CELERY_APP_MODULE, "flower", "--basic-auht=a:b"])
        )
