"""Query functions of trust in shared rules files: an admin trusts a file's content (by hash),
which releases the rules synced from it; an edit of the file revokes that until trusted again.

Rules from a shared file start `untrusted` (`ade_tasks.db.rules.UNTRUSTED`) and may not run.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from ade_tasks.clock import utcnow
from ade_tasks.db.rules import TRUSTED, in_batches
from ade_tasks.db.schema import RuleRow, TrustedHashRow
from ade_tasks.errors import NotFoundError


def trusted_hashes(session: Session, hashes: set[str]) -> set[str]:
    """Which of these shared-file hashes an admin has trusted."""
    if not hashes:
        return set()
    found: set[str] = set()
    for batch in in_batches(sorted(hashes)):
        found.update(
            session.scalars(
                select(TrustedHashRow.content_hash).where(TrustedHashRow.content_hash.in_(batch))
            )
        )
    return found


def trust_hash(session: Session, content_hash: str, by: str) -> list[str]:
    """Trust a shared rules file's content; returns the ids of the rules it releases.

    Only a hash that some synced rule came from can be trusted, so a typo never trusts a file
    nobody reviewed.
    """
    rows = session.scalars(select(RuleRow).where(RuleRow.source_hash == content_hash)).all()
    if not rows:
        raise NotFoundError(
            f"no synced rule comes from a shared rules file with sha256 {content_hash}; "
            "list the untrusted ones with `ade-tasks rules list`"
        )
    if session.get(TrustedHashRow, content_hash) is None:
        session.add(
            TrustedHashRow(
                content_hash=content_hash,
                trusted_by=by,
                trusted_at=utcnow(),
                source_file=rows[0].source_file,
            )
        )
    for row in rows:
        row.trust_state = TRUSTED
    return sorted(row.id for row in rows)
