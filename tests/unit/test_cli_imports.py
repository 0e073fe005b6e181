"""Each CLI module imports on its own, whichever is first (they attach commands to the groups of
`ade_api.cli.base`; the package imports them all), and the CLI starts without the heavy layers."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import ade_api

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
