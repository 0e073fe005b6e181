"""Each CLI module imports on its own, whichever is first (they attach commands to the groups of
`ade_api.cli.root`); a command imports only its own module (ade_api/cli/registry.py), whose map
names every command; `--version` imports no settings, HTTP client or domain, and `runs list`
neither pydantic (the settings) nor httpx nor the database nor Celery. Start-up time itself is measured in bench/cli_startup.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import click
import pytest

import ade_api
from ade_api.cli import main, registry

MODULES = sorted(
    f"ade_api.cli.{path.stem}" for path in (Path(ade_api.__file__).parent / "cli").glob("*.py")
)


@pytest.mark.parametrize("module", MODULES)
def test_a_cli_module_imports_first(module: str) -> None:
    imported = subprocess.run(
        [sys.executable, "-c", f"import {module}"], capture_output=True, text=True, timeout=60
    )
    assert imported.returncode == 0, imported.stderr


def test_the_cli_starts_without_the_database_or_agent_layers() -> None:
    # Every command pays for what `ade_api.cli` imports; SQLAlchemy and the agent sessions were
    # half of it. Commands that need them import them when they run.
    loaded = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, ade_api.cli; "
            "print(sorted(m for m in ('sqlalchemy', 'ade_workers.agents.provider_check', "
            "'celery') if m in sys.modules))",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert loaded.returncode == 0, loaded.stderr
    assert loaded.stdout.strip() == "[]"


def loaded_after(argv: list[str], modules: tuple[str, ...]) -> dict[str, list[str]]:
    """Which of `modules` (and which command modules) `ade-tasks argv` imported, run in a fresh
    interpreter with nothing listening at the API address it is given."""
    script = (
        "import json, sys\n"
        "from ade_api.cli import main\n"
        f"try:\n    main({argv!r})\nexcept SystemExit:\n    pass\n"
        f"print(json.dumps({{'heavy': sorted(m for m in {modules!r} if m in sys.modules), "
        "'commands': sorted(m for m in sys.modules if m.startswith('ade_api.cli.'))}))"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout.splitlines()[-1]))


def test_version_imports_no_settings_http_client_or_domain() -> None:
    heavy = ("pydantic", "pydantic_settings", "httpx", "sqlalchemy", "celery", "fastapi",
             "ade_tasks", "ade_workers")  # fmt: skip

    loaded = loaded_after(["--version"], heavy)

    assert loaded["heavy"] == []
    assert loaded["commands"] == ["ade_api.cli.registry", "ade_api.cli.root"]


def test_runs_list_imports_neither_the_settings_models_nor_httpx_nor_the_database() -> None:
    # It reads the API address alone (ade_tasks/api_address.py) and GETs with the stdlib.
    heavy = ("pydantic", "pydantic_settings", "ade_tasks.settings", "httpx", "sqlalchemy",
             "celery", "fastapi", "yaml")  # fmt: skip

    loaded = loaded_after(["runs", "list", "--url", "http://127.0.0.1:9"], heavy)

    assert loaded["heavy"] == []
    assert loaded["commands"] == [
        "ade_api.cli.history", "ade_api.cli.plain_http", "ade_api.cli.registry",
        "ade_api.cli.root", "ade_api.cli.run_stream", "ade_api.cli.step_lines",
    ]  # fmt: skip


def defined_commands(group: click.Group) -> dict[str, str]:
    """Each command of `group` (all its modules imported) by name: the module defining it."""
    ctx = click.Context(group)
    return {name: group.get_command(ctx, name).callback.__module__  # type: ignore[union-attr]
            for name in group.list_commands(ctx)}  # fmt: skip


@pytest.mark.parametrize(
    ("group", "lazy"),
    [((), registry.ROOT), (("rules",), registry.RULES), (("runs",), registry.RUNS)],
    ids=["ade-tasks", "rules", "runs"],
)
def test_the_registry_names_the_module_of_every_command(
    group: tuple[str, ...], lazy: dict[str, str]
) -> None:
    command: click.Command | None = main
    for name in group:
        assert isinstance(command, click.Group)
        command = command.get_command(click.Context(command), name)
    assert isinstance(command, click.Group)

    outside_root = {name: module for name, module in defined_commands(command).items()
                    if module != "ade_api.cli.root"}  # fmt: skip

    missing = {name: module for name, module in outside_root.items() if lazy.get(name) != module}
    assert not missing, f"add to ade_api/cli/registry.py ({' '.join(group) or 'ROOT'}): {missing}"
    assert set(lazy) <= set(outside_root), "the registry names commands that do not exist"
