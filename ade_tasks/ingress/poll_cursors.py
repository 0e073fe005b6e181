"""Where GitHub polling resumes: one cursor per repository, in the database, in ADE's format.

**Format.** A cursor is the text `owner/name=ISO` (ADE's `slug=iso|slug=iso` with one entry);
the `--since` option and the legacy file hold several joined with `|`. Two legacy shapes are
read too: a bare ISO instant (what a single-repository poller kept) and the old local file
`<ADE_DATA_DIR>/poll-github.cursor`.

**One row per repository** (`ingress_cursors.source = github-poll:owner/name`), not one row for
all: each repository is claimed and polled on its own, possibly by different beats, so each
poll's read-modify-write locks only its own row, two beats polling two repositories never wait
on each other, and a bad cursor of one repository stops only that one.

**Written with the events it covers.** `commit` stores a poll's events and its new cursor in one
transaction, with the row locked, and only if the cursor is still the one the poll started from
(compare and set): a poll that lost the race to another (a slow poll overtaken by the next
slot's, or `--once` beside a beat) stores nothing, so no window is committed twice and a
rewind by `--since` is never undone by a poll already under way.

**The legacy file** is imported once, on a poller's first cycle on that machine: each entry
fills a repository that has no database cursor yet (a bare ISO in the file fills every polled
repository), then the file is renamed to `poll-github.cursor.imported`, so it is never read
again and an operator can see what was imported.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from ade_tasks.db import cursors as cursors_db
from ade_tasks.db.schema import IngressCursorRow
from ade_tasks.errors import InvalidInputError

CURSOR_FILE = "poll-github.cursor"
IMPORTED_SUFFIX = ".imported"
SOURCE_PREFIX = "github-poll:"
_REPO = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")
_ISO_EXAMPLE = "2024-05-01T10:00:00Z"


def parse_time(text: str) -> datetime:
    """An ISO 8601 instant with a zone as aware UTC; ValueError saying what is wrong."""
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(f"{text!r} is not an ISO 8601 time such as {_ISO_EXAMPLE}") from None
    if when.tzinfo is None or when.utcoffset() is None:
        raise ValueError(f"{text!r} has no zone; add Z for UTC, e.g. {_ISO_EXAMPLE}")
    return when.astimezone(UTC)


def format_time(when: datetime) -> str:
    """`when` as GitHub writes times (UTC, whole seconds: 2024-05-01T10:00:00Z)."""
    if when.tzinfo is None or when.utcoffset() is None:
        raise ValueError(f"a naive datetime has no place in a cursor: {when.isoformat()}")
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def check_repo(repo: str) -> str:
    """`repo` stripped, if it looks like owner/name; InvalidInputError otherwise."""
    name = repo.strip()
    if not _REPO.match(name):
        raise InvalidInputError(f"repository {repo!r} must look like owner/name (e.g. acme/api)")
    return name


def unique_repos(repos: Iterable[str]) -> list[str]:
    """`repos` without repeats; GitHub names are case-insensitive (Acme/API is acme/api)."""
    seen: dict[str, str] = {}
    for repo in repos:
        seen.setdefault(repo.lower(), repo)
    return list(seen.values())


def parse_repos(text: str) -> list[str]:
    """`owner/name,owner/name` as a list (duplicates, in any letter case, dropped)."""
    return unique_repos(check_repo(part) for part in text.split(",") if part.strip())


def parse_cursors(text: str) -> dict[str, datetime]:
    """`owner/name=ISO|owner/name=ISO` as {repo (lower case): instant}; InvalidInputError names
    the part that is wrong."""
    cursors: dict[str, datetime] = {}
    for raw in text.split("|"):
        part = raw.strip()
        if not part:
            continue
        repo, equals, when = part.partition("=")
        if not equals or not _REPO.match(repo.strip()):
            raise InvalidInputError(
                f"cursor {part!r} must look like owner/name={_ISO_EXAMPLE} (several joined with |)"
            )
        key = repo.strip().lower()
        if key in cursors:
            raise InvalidInputError(f"cursor {part!r}: {repo.strip()} is given twice")
        try:
            cursors[key] = parse_time(when)
        except ValueError as exc:
            raise InvalidInputError(f"cursor {part!r}: {exc}") from None
    return cursors


def format_cursors(cursors: Mapping[str, datetime]) -> str:
    """The cursor text `parse_cursors` reads back (repositories in alphabetical order)."""
    return "|".join(f"{repo.lower()}={format_time(when)}" for repo, when in sorted(cursors.items()))


def parse_legacy(text: str) -> dict[str, datetime] | datetime:
    """Cursor text in any shape polling ever wrote: `owner/name=ISO|...`, or a bare ISO instant
    (returned as such: it applies to every repository). InvalidInputError says what is wrong."""
    stripped = text.strip()
    if stripped and "=" not in stripped and "|" not in stripped:
        try:
            return parse_time(stripped)
        except ValueError as exc:
            raise InvalidInputError(
                f"{exc}; a cursor is owner/name={_ISO_EXAMPLE} (several joined with |) or a "
                "bare ISO instant"
            ) from None
    return parse_cursors(stripped)


def source_of(repo: str) -> str:
    """The `ingress_cursors.source` of a repository's poll cursor."""
    return f"{SOURCE_PREFIX}{repo.lower()}"


@dataclass(frozen=True)
class StoredCursor:
    """A repository's cursor as the database holds it: the raw text (compared when the poll
    commits) and the instant it means (None: never polled)."""

    text: str | None
    since: datetime | None


def read(session: Session, repo: str) -> StoredCursor:
    """The stored cursor of `repo`; InvalidInputError naming the row and the fix if its text is
    not a cursor."""
    text = cursors_db.read(session, source_of(repo))
    if text is None:
        return StoredCursor(None, None)
    try:
        parsed = parse_legacy(text)
    except InvalidInputError as exc:
        raise InvalidInputError(_bad_row(repo, text, exc.message)) from None
    if isinstance(parsed, datetime):
        return StoredCursor(text, parsed)
    if repo.lower() not in parsed:
        raise InvalidInputError(_bad_row(repo, text, f"it has no entry for {repo.lower()}"))
    return StoredCursor(text, parsed[repo.lower()])


def _bad_row(repo: str, text: str, why: str) -> str:
    return (
        f"ingress_cursors row {source_of(repo)!r} holds {text[:200]!r}, which is not a poll "
        f"cursor: {why}; set it with `ade-tasks poll github --once --since "
        f"{repo.lower()}={_ISO_EXAMPLE}` (or delete the row to start at the current time)"
    )


def cursor_text(repo: str, when: datetime) -> str:
    """What a repository's row holds: `owner/name=ISO`."""
    return format_cursors({repo.lower(): when})


def locked_text(session: Session, repo: str) -> tuple[bool, str | None]:
    """(the row exists, its text), with the row locked until the transaction ends (PostgreSQL;
    SQLite serializes writers instead)."""
    statement = select(IngressCursorRow.value).where(IngressCursorRow.source == source_of(repo))
    value = session.execute(statement.with_for_update()).scalar_one_or_none()
    return value is not None, value


def write(session: Session, repo: str, when: datetime, *, by: str, now: datetime) -> None:
    """Store `when` as the cursor of `repo` (unconditionally: `--since` and imports)."""
    cursors_db.write(session, source_of(repo), cursor_text(repo, when), by=by, now=now)


def import_legacy_file(
    session: Session, path: Path, repos: Sequence[str], *, by: str, now: datetime
) -> list[str] | None:
    """Fill the repositories without a database cursor from the legacy file at `path`; the
    repositories filled (None: no file). The caller renames the file after the commit."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    try:
        parsed = parse_legacy(text)
    except InvalidInputError as exc:
        raise InvalidInputError(
            f"the legacy cursor file {path}: {exc.message}; fix or delete the file (it is "
            "imported into the database once, then renamed)"
        ) from None
    entries = {repo.lower(): parsed for repo in repos} if isinstance(parsed, datetime) else parsed
    filled = []
    for repo, when in sorted(entries.items()):
        if cursors_db.read(session, source_of(repo)) is None:
            write(session, repo, when, by=by, now=now)
            filled.append(repo)
    return filled


def retire_legacy_file(path: Path) -> Path:
    """Rename an imported legacy file so it is never read again; its new path."""
    done = path.with_name(path.name + IMPORTED_SUFFIX)
    path.replace(done)
    return done


def next_cursor(
    since: datetime,
    issues: Sequence[Mapping[str, object]],
    comments: Sequence[Mapping[str, object]],
    *,
    limit: int,
) -> datetime:
    """Where the next poll of a repository starts: the newest updated_at of the issue listing,
    held back to the comment listing's newest when that listing stopped at its item limit (the
    comments past it are not seen yet), never before `since`."""
    newest = _newest(issues) or since
    if len(comments) >= limit:
        newest = min(newest, _newest(comments) or since)
    return max(since, newest)


def _newest(items: Iterable[Mapping[str, object]]) -> datetime | None:
    stamps = []
    for item in items:
        value = item.get("updated_at")
        if isinstance(value, str):
            try:
                stamps.append(parse_time(value))
            except ValueError:
                continue
    return max(stamps, default=None)
