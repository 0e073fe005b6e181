"""Root fixtures: a developer's ADE_* environment and `.env` never leak into a test."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ade_tasks.settings import get_settings
from tests.support import FAULT_REPORTS

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _clean_ade_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in list(os.environ):
        if name.startswith("ADE_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("ADE_ENV_FILE", "")  # no env file, in this process or its children
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


def write_rule(directory: Path, name: str, text: str) -> Path:
    """Write a rule file (dedented YAML) into `directory`."""
    import textwrap

    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(textwrap.dedent(text).lstrip())
    return path


def pytest_configure(config: pytest.Config) -> None:
    """The tests' child processes start with Ctrl-C and SIGQUIT as an interactive shell gives
    them. A test run started in the background by a non-interactive shell (`make test &`, CI
    runners) ignores both, every child inherits that, and Python then installs no
    KeyboardInterrupt handler: `ade-tasks watch` would ignore the Ctrl-C its test sends."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if signal.getsignal(signal.SIGQUIT) is signal.SIG_IGN:
        signal.signal(signal.SIGQUIT, signal.SIG_DFL)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Under pytest-xdist, a worker hands its fault-suite lines to the controller."""
    output = getattr(session.config, "workeroutput", None)
    if output is not None:
        output["fault_reports"] = list(FAULT_REPORTS)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """The controller's side of `pytest_sessionfinish`: collect a finished worker's lines."""
    FAULT_REPORTS.extend(getattr(node, "workeroutput", {}).get("fault_reports", ()))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The fault suite's counts, one line per scenario."""
    if FAULT_REPORTS:
        terminalreporter.section("fault suite: runs lost / duplicated / stuck / wrongly failed")
        for line in FAULT_REPORTS:
            terminalreporter.write_line(line)
