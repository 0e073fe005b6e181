"""Tokens, the audit log, and who the caller is (see `ade_api.http.auth` for the roles)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from ade_api.http.auth import Principal
from ade_api.http.deps import ServicesDep, SessionDep
from ade_api.http.schemas.params import MAX_ID, Instant, RowId
from ade_api.http.schemas.problem import problem_responses
from ade_tasks.access.roles import Role
from ade_tasks.db import tokens as tokens_db
from ade_tasks.errors import InvalidInputError
from ade_tasks.runs.dispatch import AUTOMATIONS_DISABLED

router = APIRouter(prefix="/api/v1", tags=["admin"])


class TokenOut(BaseModel):
    """A token as listed: never its secret."""

    model_config = ConfigDict(from_attributes=True)

    id: int
    name: str
    role: Role
    prefix: str = Field(description="the first characters of the secret, to tell tokens apart")
    created_at: datetime
    created_by: str
    last_used_at: datetime | None
    revoked_at: datetime | None


class NewToken(BaseModel):
    """A token to create."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=128)
    role: Role


class CreatedToken(TokenOut):
    """A created token with its secret, shown this once."""

    token: str


class AuditOut(BaseModel):
    """One state-changing call."""

    model_config = ConfigDict(from_attributes=True)

    id: int
    at: datetime
    actor: str
    role: Role
    method: str
    path: str
    status_code: int


class Me(BaseModel):
    """The caller's token."""

    name: str
    role: Role
    automations_disabled: bool = Field(
        default=False, description="the kill switch ADE_DISABLE_AUTOMATIONS is on"
    )
    notice: str | None = Field(default=None, description="what the kill switch means, when on")


def principal_of(request: Request) -> Principal:
    """The caller the auth middleware identified."""
    principal: Principal = request.state.principal
    return principal


TOKEN_ERRORS = problem_responses({404: "no such token", 409: "the token is already revoked"})


@router.get("/me")
def me(request: Request, services: ServicesDep) -> Me:
    """Who the caller's token says it is, and whether the cluster's kill switch is on."""
    principal = principal_of(request)
    disabled = services.settings.disable_automations
    notice = AUTOMATIONS_DISABLED if disabled else None
    return Me(
        name=principal.name, role=principal.role, automations_disabled=disabled, notice=notice
    )


@router.get("/tokens")
def list_tokens(session: SessionDep) -> list[TokenOut]:
    """Every token, revoked ones included (admin)."""
    return [TokenOut.model_validate(row) for row in tokens_db.list_tokens(session)]


@router.post("/tokens", status_code=201)
def create_token(body: NewToken, request: Request, services: ServicesDep) -> CreatedToken:
    """Create a token; its secret is in this answer only (admin)."""
    with services.session_factory.begin() as session:
        row, secret = tokens_db.create_token(
            session, body.name, body.role, principal_of(request).name
        )
        return CreatedToken(**TokenOut.model_validate(row).model_dump(), token=secret)


@router.delete("/tokens/{token_id}", responses=TOKEN_ERRORS)
def revoke_token(token_id: RowId, services: ServicesDep) -> TokenOut:
    """Revoke a token; calls with it fail with 401 from now on (admin)."""
    with services.session_factory.begin() as session:
        return TokenOut.model_validate(tokens_db.revoke_token(session, token_id))


@router.get("/audit")
def audit(
    session: SessionDep,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
    before: Annotated[
        int | None, Query(ge=1, le=MAX_ID, description="cursor: entries older than this id")
    ] = None,
    since: Annotated[Instant | None, Query(description="ISO 8601 with a time zone")] = None,
) -> list[AuditOut]:
    """State-changing calls, newest first (admin)."""
    if since is not None and since.tzinfo is None:
        raise InvalidInputError(
            f"since={since.isoformat()} has no time zone; add one, e.g. Z or +00:00"
        )
    rows = tokens_db.audit_log(session, limit, before, since)
    return [AuditOut.model_validate(row) for row in rows]
