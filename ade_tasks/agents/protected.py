"""The engine's own data, which no agent tool reads or writes, and `.git`, which none writes.

Whatever a rule's policy says, in dev mode and on a cluster: the data directory (`.ade/` by
default: the SQLite database, the dev stack's API token, lanes of other sessions), the SQLite
database file wherever the database URL puts it, and every `.ade` directory inside the worktree
are neither readable nor writable; `.git` (and any nested `.git`) is readable but never
writable, since git runs hooks and reads config from it. The rules directory holds no secret
values (a rule names `${env:NAME}`, resolved from the worker's environment), so it stays
readable.

A path is judged both as written (`.ade/../.ade/api-token` normalised) and as resolved
(symlinks followed), and names are compared case-insensitively, so neither a symlink nor a
case-insensitive filesystem reaches the data. When the worktree itself lies inside the data
directory (a lane under `.ade/lanes/`), the worktree is the agent's and the rest stays protected.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from ade_tasks.settings import Settings

DATA_DIR_NAME = ".ade"
"""A directory of this name anywhere in a worktree is engine data (dev mode's default)."""
GIT_DIR_NAME = ".git"
_SQLITE_SIDE_FILES = ("", "-wal", "-shm", "-journal")


@dataclass(frozen=True)
class ProtectedPaths:
    """What agent tools may not touch in one worktree: engine data (no reads, no writes) and
    git internals (no writes), plus the engine's secret values every session masks."""

    worktree: str
    """The worktree's real path."""
    engine_data: tuple[tuple[str, str], ...] = ()
    """(real path, what it is) of each engine file or directory outside the `.ade` rule."""
    secrets: tuple[str, ...] = field(default=(), repr=False)
    """Values of the engine's own credentials (API tokens, keys), for every session's masker."""
    engine_code: tuple[tuple[str, str], ...] = ()
    """(real path, what it is) of the engine's code: readable, never writable (an agent whose
    project is the engine's checkout must not change what the engine runs)."""

    @classmethod
    def for_worktree(cls, worktree: Path) -> ProtectedPaths:
        """The protection that needs no settings: `.ade` directories and `.git` in the worktree,
        and the token of a dev stack started in the worktree (`.ade/api-token`)."""
        real = os.path.realpath(worktree)
        token = _read_secret(Path(real) / DATA_DIR_NAME / "api-token")
        return cls(worktree=real, secrets=tuple(v for v in (token,) if v))

    @classmethod
    def from_settings(cls, settings: Settings, worktree: Path) -> ProtectedPaths:
        """Everything `for_worktree` protects, plus the configured data directory, the SQLite
        database file and the engine's credentials from `settings`."""
        base = cls.for_worktree(worktree)
        return cls(
            worktree=base.worktree,
            engine_data=engine_data(settings),
            secrets=tuple(dict.fromkeys([*base.secrets, *engine_secrets(settings)])),
            engine_code=engine_code(),
        )

    def refusal(self, path: str, *, writes: bool) -> str | None:
        """Why an agent may not read (or, with `writes`, write) `path`; None when it may.

        `path` is as the call gives it: absolute, or relative to the worktree.
        """
        if "\x00" in path:
            return f"{path!r} contains a NUL byte; it names no file"
        lexical = os.path.normpath(os.path.join(self.worktree, path))
        for candidate in dict.fromkeys((lexical, os.path.realpath(lexical))):
            why = self._protects(candidate, writes)
            if why is not None:
                return f"{path} is {why}"
        return None

    def hides(self, real_or_lexical: str) -> bool:
        """Whether a listing or search must leave this path out (it is engine data)."""
        return self._protects(real_or_lexical, writes=False) is not None

    def _protects(self, candidate: str, writes: bool) -> str | None:
        for root, what in self.engine_code if writes else ():
            if _inside(root, candidate):
                return f"the engine's own code ({what}); agents never change it"
        for root, what in self.engine_data:
            if _inside(root, candidate) and not (
                _inside(root, self.worktree) and _inside(self.worktree, candidate)
            ):
                return f"the engine's own data ({what}); agents never read or write it"
        if not _inside(self.worktree, candidate):
            return None  # outside the worktree: the worktree bound, not this, refuses it
        parts = [p.casefold() for p in Path(os.path.relpath(candidate, self.worktree)).parts]
        if DATA_DIR_NAME in parts:
            return (
                f"the engine's own data (a {DATA_DIR_NAME} data directory); "
                "agents never read or write it"
            )
        if writes and GIT_DIR_NAME in parts:
            return f"inside {GIT_DIR_NAME}; agents never write git internals"
        return None


def engine_data(settings: Settings) -> tuple[tuple[str, str], ...]:
    """The engine's data as `settings` place it: the data directory, the SQLite database's
    files and the API token file (real path, what it is)."""
    data: list[tuple[str, str]] = [
        (os.path.realpath(settings.data_dir), f"the data directory {settings.data_dir}")
    ]
    database = _sqlite_file(settings.effective_database_url)
    if database is not None:
        data += [
            (os.path.realpath(database + suffix), f"the SQLite database {database}")
            for suffix in _SQLITE_SIDE_FILES
        ]
    token_file = settings.dev_token_file
    data.append((os.path.realpath(token_file), f"the API token file {token_file}"))
    return tuple(dict.fromkeys(data))


@lru_cache(maxsize=1)
def engine_code() -> tuple[tuple[str, str], ...]:
    """The engine's packages (the three of its distribution, siblings of this one) and the
    virtualenv it runs in."""
    root = Path(__file__).resolve().parents[2]
    code = [
        (os.path.realpath(root / name), f"the package {name}")
        for name in ("ade_tasks", "ade_workers", "ade_api")
    ]
    if sys.prefix != sys.base_prefix:
        code.append((os.path.realpath(sys.prefix), f"the virtualenv {sys.prefix}"))
    return tuple(code)


def engine_secrets(settings: Settings) -> tuple[str, ...]:
    """The engine's credential values a session must never show: API tokens (ADE_API_TOKEN and
    the dev stack's token file), GitHub's token and webhook secret, hook secrets and tokens,
    provider keys and the database password."""
    values: list[str | None] = [_read_secret(settings.dev_token_file)]
    secret_fields = [
        settings.api_token,
        settings.github.token,
        settings.github.webhook_secret,
        *(p.api_key for p in settings.providers.values()),
        *(s for hook in settings.hooks.values() for s in (*hook.secrets, *hook.tokens)),
    ]
    values += [s.get_secret_value() for s in secret_fields if s is not None]
    values.append(_database_password(settings.database_url))
    return tuple(dict.fromkeys(v for v in values if v and v.strip()))


def _read_secret(path: Path) -> str | None:
    try:
        return path.read_text().strip() or None
    except (OSError, UnicodeDecodeError):
        return None


def _sqlite_file(url: str) -> str | None:
    """The database file of a SQLite URL; None for other databases and in-memory SQLite."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        return None
    if not parsed.drivername.startswith("sqlite"):
        return None
    database = parsed.database or ""
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    return database


@lru_cache(maxsize=8)
def _database_password(url: str) -> str | None:
    # Cached: parsing the URL was most of what masking cost every run (0.04 of 0.05 ms); the
    # token file is still read each time, so a token the dev stack rotates is masked at once.
    if not url:
        return None
    try:
        return make_url(url).password
    except ArgumentError:
        return None


def _inside(root: str, path: str) -> bool:
    root_key, path_key = root.casefold(), path.casefold()
    return os.path.commonpath([root_key, path_key]) == root_key
