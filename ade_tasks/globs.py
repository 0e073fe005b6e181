"""Path globs as rules write them (`src/**`, `**/*.py`, `release/*`), for file paths and branches.

`**/` matches zero or more whole directories and any other `**` matches anything, `/` included;
`*` and `?` stay within one path segment; every other character, `[` included, is literal. A
glob must match the whole path. `fnmatch` is no fit: its `*` crosses `/`, so `src/*.py` would
take `src/sub/x.py`, and a branch glob `release/*` would take `release/a/b`.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable

from ade_tasks.patterns import Pattern, compile_pattern

_GLOB_PARTS = {"**/": "(?:.*/)?", "**": ".*", "*": "[^/]*", "?": "[^/]"}


@functools.lru_cache(maxsize=1024)
def glob_regex(glob: str) -> Pattern:
    """The compiled regex of a path glob; use `fullmatch`. A leading `/` is ignored.

    Compiled with RE2 (`ade_tasks.patterns`): with a backtracking engine, `*a*a*a*a*c` takes
    seconds against a 200-character branch name anyone opening a pull request chooses."""
    tokens = re.split(r"(\*\*/|\*\*|\*|\?)", glob.lstrip("/"))
    # re.split puts the captured wildcards at odd indexes, the literal text between them at even.
    regex = "".join(_GLOB_PARTS[t] if i % 2 else re.escape(t) for i, t in enumerate(tokens))
    return compile_pattern("(?s)" + regex, max_program=None)


def path_matches(path: str, globs: Iterable[str]) -> bool:
    """Whether a relative path matches any of `globs`; never for an absolute or `..` path."""
    # A `..` segment or an absolute path could satisfy `src/**` textually yet leave src/.
    if path.startswith("/") or ".." in path.split("/"):
        return False
    return any(glob_regex(glob).fullmatch(path) for glob in globs)
