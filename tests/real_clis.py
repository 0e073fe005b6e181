"""Where the tests find the real agent CLIs: `make test` installs the versions pinned in
`tests/agent_clis/package-lock.json` with `npm ci` into `.venv/agent-clis`.

`ADE_TEST_CLAUDE` / `ADE_TEST_CODEX` point the tests at another binary. A CLI that is missing
skips its tests locally, with the reason, and fails them under CI (`CI` set), which must have it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
INSTALLED = ROOT / ".venv" / "agent-clis" / "node_modules" / ".bin"
_OVERRIDES = {"claude": "ADE_TEST_CLAUDE", "codex": "ADE_TEST_CODEX"}
#: Read at import: the tests' conftest clears ADE_* variables from the environment of each test.
_OVERRIDDEN = {name: os.environ.get(variable) for name, variable in _OVERRIDES.items()}


def real_cli(name: str) -> Path:
    """The path of the real `claude` or `codex` binary; skip (or fail under CI) without it."""
    override = _OVERRIDDEN[name]
    path = Path(override) if override else INSTALLED / name
    if path.is_file() and os.access(path, os.X_OK):
        return path
    reason = (
        f"the real {name} CLI is not installed at {path}: run `make test` (it installs the pinned "
        f"CLIs with npm ci; needs node and npm) or set {_OVERRIDES[name]}"
    )
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (CI must provide it)")
    pytest.skip(reason)
    raise AssertionError("unreachable")  # pytest.skip raises; this keeps type checkers calm
