"""Path containment: every way out of the project root is refused."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ade_tasks.errors import PolicyViolationError
from ade_tasks.paths import resolve_inside


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "a" / "sub").mkdir(parents=True)
    (tmp_path / "ab").mkdir()
    (tmp_path / "outside").mkdir()
    os.symlink(tmp_path / "outside", tmp_path / "a" / "escape")
    os.symlink(tmp_path / "a" / "escape", tmp_path / "a" / "chain")
    os.symlink(tmp_path / "a" / "sub", tmp_path / "a" / "inner")
    return tmp_path / "a"


@pytest.mark.parametrize(
    "path",
    ["../..", "..", "sub/../../ab", "escape", "chain", "escape/deeper", "/etc", "../ab"],
)
def test_paths_leaving_the_root_are_refused(root: Path, path: str) -> None:
    with pytest.raises(PolicyViolationError, match="outside"):
        resolve_inside(root, path, what="cwd")


def test_absolute_path_inside_the_root_is_allowed(root: Path) -> None:
    assert resolve_inside(root, str(root / "sub")) == root / "sub"


@pytest.mark.parametrize("path", [".", "sub", "sub/../sub", "inner", "./sub/"])
def test_paths_inside_the_root_resolve_to_real_paths(root: Path, path: str) -> None:
    resolved = resolve_inside(root, path)
    assert resolved in (root, root / "sub")


def test_sibling_sharing_the_prefix_is_not_inside(tmp_path: Path) -> None:
    (tmp_path / "lanes" / "a").mkdir(parents=True)
    (tmp_path / "lanes" / "ab").mkdir()
    with pytest.raises(PolicyViolationError):
        resolve_inside(tmp_path / "lanes" / "a", str(tmp_path / "lanes" / "ab"))
