"""Fixtures of the agent tool loop's tests."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def worktree(tmp_path: Path) -> Path:
    """A worktree holding one README.md."""
    root = tmp_path / "worktree"
    root.mkdir()
    (root / "README.md").write_text("hello\n")
    return root
