"""Query functions for API tokens and the audit log.

A token is `ade_` + 32 random bytes (URL-safe base64); only its SHA-256 is stored, so a
database dump reveals no usable token. A high-entropy secret needs no slow password hash: the
digest is looked up by an index in one statement per request.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Sequence
from datetime import datetime, timedelta

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from ade_tasks.access.roles import Role
from ade_tasks.clock import utcnow
from ade_tasks.db.schema import ApiTokenRow, AuditRow
from ade_tasks.errors import ConflictError, InvalidInputError, NotFoundError

TOKEN_PREFIX = "ade_"
#: `last_used_at` is written at most this often per token, not on every request.
LAST_USED_RESOLUTION = timedelta(minutes=1)


def hash_token(token: str) -> str:
    """The stored form of a token."""
    return hashlib.sha256(token.encode()).hexdigest()


def create_token(
    session: Session, name: str, role: Role, created_by: str
) -> tuple[ApiTokenRow, str]:
    """A new token; returns its row and its secret, which is shown once and never stored."""
    if not name.strip():
        raise InvalidInputError("a token needs a --name saying who or what uses it")
    secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
    row = ApiTokenRow(
        name=name.strip(),
        role=role.value,
        token_hash=hash_token(secret),
        prefix=secret[: len(TOKEN_PREFIX) + 6],
        created_at=utcnow(),
        created_by=created_by,
    )
    session.add(row)
    session.flush()
    return row, secret


def list_tokens(session: Session) -> Sequence[ApiTokenRow]:
    """Every token, revoked ones included, oldest first."""
    return session.scalars(select(ApiTokenRow).order_by(ApiTokenRow.id)).all()


def revoke_token(session: Session, token_id: int) -> ApiTokenRow:
    """Revoke a token at once; revoking twice is a conflict that says when it happened."""
    row = session.get(ApiTokenRow, token_id)
    if row is None:
        raise NotFoundError(f"no token {token_id}; list them with `ade-tasks tokens list`")
    if row.revoked_at is not None:
        raise ConflictError(
            f"token {token_id} ({row.name}) was already revoked at {row.revoked_at}"
        )
    row.revoked_at = utcnow()
    return row


def authenticate(session: Session, token: str) -> ApiTokenRow | None:
    """The live token with this secret, or None (unknown or revoked)."""
    row = session.scalar(select(ApiTokenRow).where(ApiTokenRow.token_hash == hash_token(token)))
    if row is None or row.revoked_at is not None:
        return None
    now = utcnow()
    if row.last_used_at is None or now - row.last_used_at >= LAST_USED_RESOLUTION:
        session.execute(
            update(ApiTokenRow).where(ApiTokenRow.id == row.id).values(last_used_at=now)
        )
    return row


def record_call(
    session: Session, actor: str, role: str, method: str, path: str, status_code: int
) -> None:
    """Append one state-changing call to the audit log."""
    session.add(
        AuditRow(
            at=utcnow(),
            actor=actor,
            role=role,
            method=method,
            path=path[:512],
            status_code=status_code,
        )
    )


def audit_log(
    session: Session, limit: int = 100, before: int | None = None, since: datetime | None = None
) -> Sequence[AuditRow]:
    """Audit entries, newest first; `before` is the cursor (an entry id)."""
    stmt = select(AuditRow).order_by(AuditRow.id.desc()).limit(limit)
    if before is not None:
        stmt = stmt.where(AuditRow.id < before)
    if since is not None:
        stmt = stmt.where(AuditRow.at >= since)
    return session.scalars(stmt).all()
