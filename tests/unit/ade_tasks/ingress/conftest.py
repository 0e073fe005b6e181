"""The poller tests' shared fixtures: an in-memory GitHub and where a poller keeps its cursors."""

from __future__ import annotations

from pathlib import Path

import pytest

from ade_tasks.ingress.poll_cursors import CURSOR_FILE
from tests.unit.ade_tasks.ingress.poller_support import FakeGithub


@pytest.fixture
def github() -> FakeGithub:
    return FakeGithub()


@pytest.fixture
def cursor_file(tmp_path: Path) -> Path:
    return tmp_path / "data" / CURSOR_FILE
