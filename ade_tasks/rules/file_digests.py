"""File digests: how a sync knows, without parsing, that a rules file yields exactly the rules
the database already holds from it.

A file rule's row keeps a digest of (the code that parses rules, the file's bytes, the ids and
content hashes of every rule the file yielded). A sync reads the file's bytes, recomputes the
digest over the rows the database holds for that file, and skips parsing it when every row's
stored digest matches. So any edit of the file (its bytes), a rename (another path), a rule of
the file deleted or changed in the database since (another set of ids and hashes), or another
release of ADE (another fingerprint) makes the sync parse the file again. Only the bytes count:
an edit that keeps the file's mtime is seen like any other.

A file gets no digest (it is parsed on every sync) when it had a problem, or when a rule of it
is admitted by the date (a one-shot `run_at` or `delay_seconds`: refused once it is past).
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterable, Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import NamedTuple

import ade_tasks


class KnownRule(NamedTuple):
    """What the database holds of one file rule: enough to tell whether its file changed."""

    rule_id: str
    content_hash: str
    file_digest: str | None


#: Per source file (as the rows name it), the file rules the database holds from it.
KnownFiles = Mapping[str, Sequence[KnownRule]]


@functools.cache
def parser_fingerprint() -> bytes:
    """A hash of the code that turns a file into rules: every `ade_tasks` module and the
    versions of the libraries validating them. Another release gives another fingerprint,
    so its first sync parses every file again (its defaults or checks may differ)."""
    digest = hashlib.sha256()
    root = Path(ade_tasks.__file__).parent
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    for package in ("pydantic", "pydantic-core", "PyYAML"):
        digest.update(f"{package}={_version(package)}\0".encode())
    return digest.digest()


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "absent"


def bytes_key(raw: bytes) -> bytes:
    """The parser fingerprint and a file's bytes in one hash."""
    return hashlib.sha256(parser_fingerprint() + raw).digest()


def file_digest(key: bytes, rules: Iterable[tuple[str, str]]) -> str:
    """The digest a file's rows keep: its `bytes_key` and its rules' (id, content hash)."""
    digest = hashlib.sha256(key)
    for rule_id, content_hash in sorted(rules):
        digest.update(f"\0{rule_id}\0{content_hash}".encode())
    return digest.hexdigest()


def unchanged(known: Sequence[KnownRule], key: bytes) -> bool:
    """Do these rows hold exactly what the file whose `bytes_key` is `key` yields?"""
    if not known:
        return False
    expected = file_digest(key, ((row.rule_id, row.content_hash) for row in known))
    return all(row.file_digest == expected for row in known)
