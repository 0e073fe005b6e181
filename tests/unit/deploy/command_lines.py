"""What a deploy file's command line runs: the `ade-tasks` command it names (resolved as click
resolves it), the Celery command `ade-tasks worker` / `beat` pass options on to, a `celery -A`
invocation and Flower's options, and which queues a worker consumes.
"""

from __future__ import annotations

from pathlib import Path

import click
from celery.bin.beat import beat as celery_beat_command
from celery.bin.worker import worker as celery_worker_command
from flower.options import options as flower_options

from ade_api.cli import main as cli
from ade_tasks.settings import Settings
from ade_workers.celery.app import DEFAULT_QUEUES

CELERY_APP_MODULE = "ade_workers.celery.app"
# `ade-tasks worker` / `ade-tasks beat` pass unknown options on to these Celery commands.
PASSTHROUGH = {"worker": celery_worker_command, "beat": celery_beat_command}


def _option_names(command: click.Command) -> dict[str, click.Option]:
    return {
        name: param
        for param in command.params
        if isinstance(param, click.Option)
        for name in (*param.opts, *param.secondary_opts)
    }


def resolve_cli(args: list[str]) -> tuple[click.Command, list[str], list[str], click.Context]:
    """The click command `ade-tasks args...` names, its path, the arguments left for it, and
    the context of its group to make its own context under (`make_context(..., parent=)`).

    Contexts are made as click makes them when the command runs, each under its parent: a
    context made without its parent lacks the root's `-h`, and click caches the help option
    it builds from that on the command object, so later `-h` tests of it would fail."""
    command: click.Command = cli
    ctx = click.Context(cli, info_name="ade-tasks", **cli.context_settings)
    path: list[str] = []
    rest = list(args)
    while isinstance(command, click.Group):
        assert rest and not rest[0].startswith("-"), (
            f"`ade-tasks {' '.join(path)}` needs a subcommand, got {rest[:1]}"
        )
        name = rest.pop(0)
        sub = command.get_command(ctx, name)  # the groups import their commands lazily
        assert sub is not None, (
            f"`ade-tasks {' '.join([*path, name])}` does not exist; "
            f"`ade-tasks {' '.join(path)}` has: {', '.join(command.list_commands(ctx))}"
        )
        command, path = sub, [*path, name]
        if isinstance(command, click.Group):
            ctx = click.Context(command, info_name=name, parent=ctx, **command.context_settings)
    return command, path, rest, ctx


def celery_invocation(argv: list[str]) -> tuple[str, str, list[str]]:
    """(app module, subcommand, its arguments) of `celery -A module sub ...`."""
    app, rest = "", list(argv[1:])
    while rest and rest[0].startswith("-"):
        token = rest.pop(0)
        if token in ("-A", "--app"):
            app = rest.pop(0)
        elif token.startswith(("-A=", "--app=")):
            app = token.split("=", 1)[1]
        else:
            raise AssertionError(f"unexpected celery option {token}")
    assert rest, f"no celery subcommand in {argv}"
    return app, rest[0], rest[1:]


def flower_option_values(args: list[str]) -> dict[str, str]:
    known = set(flower_options.as_dict())
    values: dict[str, str] = {}
    i = 0
    while i < len(args):
        token = args[i]
        i += 1
        assert token.startswith("--"), f"flower takes --name=value options, got {token!r}"
        name, sep, value = token[2:].partition("=")
        key = name.replace("-", "_")
        assert key in known, f"flower has no option --{name}"
        if not sep and i < len(args) and not args[i].startswith("--"):
            value, i = args[i], i + 1
        values[key] = value
    return values


def _is_beat(argv: list[str]) -> bool:
    if argv[:1] and Path(argv[0]).name == "ade-tasks":
        return argv[1:2] == ["beat"]
    return Path(argv[0]).name == "celery" and "beat" in argv if argv else False


def _worker_queues(argv: list[str]) -> list[str] | None:
    """The queues `ade-tasks worker` / `celery worker` consumes, None if argv is not a worker."""
    if not argv or Path(argv[0]).name not in ("ade-tasks", "celery") or "worker" not in argv:
        return None
    if Path(argv[0]).name == "ade-tasks":
        leaf, _, rest, parent = resolve_cli(argv[1:])
        ctx = leaf.make_context("worker", list(rest), parent=parent)
        return str(ctx.params["queues"]).split(",")
    for flag in ("-Q", "--queues"):
        if flag in argv:
            return argv[argv.index(flag) + 1].split(",")
    return list(DEFAULT_QUEUES)


def _worker_concurrency(argv: list[str]) -> int:
    leaf, _, rest, parent = resolve_cli(argv[1:])
    value = leaf.make_context("worker", list(rest), parent=parent).params["concurrency"]
    return int(value) if value is not None else Settings().worker_concurrency
