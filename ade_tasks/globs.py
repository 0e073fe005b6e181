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

_GLOB_PARTS = {"**/": "(?:.*/)?", "**": ".*", "*": "[^/]*", "?": "[^/]"}


@functools.lru_cache(maxsize=1024)
def glob_regex(glob: str) -> re.Pattern[str]:
    """The compiled regex of a path glob; use `fullmatch`. A leading `/` is ignored."""
    tokens = re.split(r"(\*\*/|\*\*|\*|\?)", glob.lstrip("/"))
    # re.split puts the captured wildcards at odd indexes, the literal text between them at even.
    regex = "".join(_GLOB_PARTS[t] if i % 2 else re.escape(t) for i, t in enumerate(tokens))
    return re.compile(regex, re.DOTALL)


def path_matches(path: str, globs: Iterable[str]) -> bool:
    """Whether a relative path matches any of `globs`; never for an absolute or `..` path."""
    # A `..` segment or an absolute path could satisfy `src/**` textually yet leave src/.
    if path.startswith("/") or ".." in path.split("/"):
        return False
    return any(glob_regex(glob).fullmatch(path) for glob in globs)
