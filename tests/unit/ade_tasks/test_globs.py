"""Path globs: `**` crosses directories, `*` and `?` stay in one segment, `[` is literal."""

from __future__ import annotations

import pytest

from ade_tasks.globs import glob_regex, path_matches


@pytest.mark.parametrize(
    ("path", "glob", "matches"),
    [
        ("src/a/b/c.py", "src/**", True),
        ("src", "src/**", False),
        ("src/a/x", "src/a/**", True),
        ("src/ab/x", "src/a/**", False),  # a sibling sharing the prefix is not inside src/a
        ("src/x.py", "src/*.py", True),
        ("src/sub/x.py", "src/*.py", False),
        ("x.py", "**/*.py", True),
        ("a/b/x.py", "**/*.py", True),
        ("a/c", "a/**/c", True),
        ("a/b/c", "a/**/c", True),
        ("a/b/d/c", "a/**/c", True),
        ("a/bc", "a/**/c", False),
        ("a1", "a?", True),
        ("a/", "a?", False),
        ("a12", "a?", False),
        ("[x].txt", "[x].txt", True),
        ("x.txt", "[x].txt", False),
        ("a.b", "a.b", True),
        ("axb", "a.b", False),  # regex characters are literal
        ("src/x.py", "/src/*.py", True),  # a leading / in a glob means the root
        ("docs/readme.md", "docs/**/*.md", True),
        ("README.md", "*.md", True),
        ("docs/README.md", "*.md", False),
    ],
)
def test_path_glob(path: str, glob: str, matches: bool) -> None:
    assert path_matches(path, [glob]) is matches


@pytest.mark.parametrize(
    ("branch", "glob", "matches"),
    [
        ("release/1.0", "release/*", True),
        ("release/a/b", "release/*", False),
        ("release/a/b", "release/**", True),
        ("release", "release/*", False),
        ("main", "main", True),
        ("main-2", "main", False),
        ("feature/x", "*", False),
        ("feature/x", "**", True),
    ],
)
def test_branch_glob(branch: str, glob: str, matches: bool) -> None:
    assert path_matches(branch, [glob]) is matches


@pytest.mark.parametrize("path", ["src/../etc/passwd", "../src/x", "src/..", "/etc/passwd"])
def test_escaping_paths_match_nothing(path: str) -> None:
    assert path_matches(path, ["**", "src/**", "*"]) is False


def test_any_glob_of_several_matches() -> None:
    assert path_matches("docs/a.md", ["src/**", "docs/*.md"]) is True
    assert path_matches("docs/a.txt", ["src/**", "docs/*.md"]) is False


def test_no_globs_match_nothing() -> None:
    assert path_matches("src/a.py", []) is False


def test_compiled_regexes_are_cached() -> None:
    assert glob_regex("src/**/*.py") is glob_regex("src/**/*.py")
