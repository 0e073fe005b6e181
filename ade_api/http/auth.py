"""Who may call what: bearer tokens with roles, checked in front of every route, and the audit
log of state-changing calls.

One table decides the role a request needs (`required_role`), so the policy reads in one place:
health probes are open, webhook deliveries are authenticated by their signatures, `/metrics` is
open only when `ADE_METRICS_PUBLIC` says so, reads need `viewer`, writes need `operator`, and
rules, tokens and the audit log need `admin`. A token comes as `Authorization: Bearer ...` or,
for the web page, as the `ade_token` cookie. It is a pure ASGI middleware so the webhook path
pays one string test and nothing else.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from http.cookies import CookieError, SimpleCookie

from starlette.concurrency import run_in_threadpool
from starlette.requests import HTTPConnection
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ade_tasks.access.actors import actor_name
from ade_tasks.access.roles import Role
from ade_tasks.db import tokens as tokens_db
from ade_tasks.db.engine import SessionFactory
from ade_tasks.db.retry import database_fault
from ade_tasks.errors import PolicyViolationError

log = logging.getLogger(__name__)

COOKIE = "ade_token"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
OPEN_PATHS = frozenset({"/healthz", "/readyz", "/docs", "/redoc", "/openapi.json"})
# A delivery to `POST /api/v1/webhooks/github` or `/api/v1/webhooks/{hook}`: its signature
# (or its hook token) is its authentication.
_WEBHOOK_DELIVERY = re.compile(r"^/api/v1/webhooks/[^/]+/?$")
_ADMIN_ONLY = ("/api/v1/tokens", "/api/v1/audit")
# Operators may start a rule's manual runs, pause or resume it (an on-call operator stops a
# misbehaving schedule without an admin) and backfill its missed slots (runs the rule would
# have made anyway); every other rule write needs an admin.
_MANUAL_RUN = re.compile(r"^/api/v1/rules/[^/]+/(runs|pause|resume|backfill)/?$")
#: Pages of the web UI that work without a token (the login form and its assets).
UI_OPEN = ("/ui/login", "/ui/static/")


@dataclass(frozen=True)
class Principal:
    """The caller a valid token identifies."""

    name: str
    role: Role
    token_id: int


def actor(request: HTTPConnection, by: str | None) -> str:
    """Who a state-changing call is recorded as: the token's name, with the `by` the caller
    gave (for a token several people share) in parentheses."""
    principal: Principal = request.state.principal
    return actor_name(principal.name, by)


def forcing_admin(request: HTTPConnection, force: bool, by: str | None) -> str:
    """Who forces a manual run past the kill switch ("" when not forcing); only an admin may:
    PolicyViolationError for another role."""
    if not force:
        return ""
    principal: Principal = request.state.principal
    if principal.role.rank < Role.ADMIN.rank:
        raise PolicyViolationError(
            f"force: only an admin token may force a run past ADE_DISABLE_AUTOMATIONS; token "
            f"{principal.name!r} has the {principal.role.value} role; leave force out, or ask an "
            "admin"
        )
    return actor(request, by)


def required_role(method: str, path: str, *, metrics_public: bool) -> Role | None:
    """The least role a request needs; None when it needs no token."""
    if path in OPEN_PATHS or path.startswith(UI_OPEN):
        return None
    if path == "/metrics":
        return None if metrics_public else Role.VIEWER
    if method == "POST" and _WEBHOOK_DELIVERY.match(path):
        return None
    if path.startswith(_ADMIN_ONLY):
        return Role.ADMIN
    if method in SAFE_METHODS:
        return Role.VIEWER
    if path.startswith("/api/v1/rules") and not _MANUAL_RUN.match(path):
        return Role.ADMIN
    return Role.OPERATOR


class AuthMiddleware:
    """Refuses calls without a good enough token and records every state-changing call."""

    def __init__(
        self, app: ASGIApp, session_factory: SessionFactory, *, metrics_public: bool
    ) -> None:
        self.app = app
        self.session_factory = session_factory
        self.metrics_public = metrics_public

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        method, path = scope["method"], scope["path"]
        needed = required_role(method, path, metrics_public=self.metrics_public)
        if needed is None:
            await self.app(scope, receive, send)
            return
        token = _credentials(scope)
        principal = await run_in_threadpool(self._authenticate, token) if token else None
        if principal is None:
            why = (
                "the token is unknown or revoked"
                if token
                else "no token was sent; send `Authorization: Bearer <token>`"
            )
            await _refuse(scope, send, 401, "Unauthorized", f"{method} {path} needs a token: {why}")
            return
        if principal.role.rank < needed.rank:
            detail = (
                f"{method} {path} needs the {needed.value} role; token {principal.name!r} has "
                f"{principal.role.value}"
            )
            await _refuse(scope, send, 403, "Forbidden", detail)
            return
        scope.setdefault("state", {})["principal"] = principal
        if method in SAFE_METHODS:
            await self.app(scope, receive, send)
            return
        audited = False

        async def audit_then_send(message: Message) -> None:
            # The call is recorded as soon as its status is known and before any of its response
            # goes out, so a client that has the response finds the call in the audit log. Not
            # at the last body part: an empty response (a form's 303) is complete at its headers,
            # and the client's next read raced the line (as a crash in between lost it).
            nonlocal audited
            if message["type"] == "http.response.start":
                audited = True
                await run_in_threadpool(
                    self._audit, principal, method, path, int(message["status"])
                )
            await send(message)

        status = 500
        try:
            await self.app(scope, receive, audit_then_send)
        except BaseException as exc:
            if database_fault(exc) is not None:
                status = 503  # what `http.db_faults`, in front of us, answers it with
            raise
        finally:
            if not audited:  # no response was started (the app raised): what the caller gets
                await run_in_threadpool(self._audit, principal, method, path, status)

    def _authenticate(self, token: str) -> Principal | None:
        with self.session_factory.begin() as session:
            row = tokens_db.authenticate(session, token)
            return None if row is None else Principal(row.name, Role(row.role), row.id)

    def _audit(self, principal: Principal, method: str, path: str, status: int) -> None:
        try:
            with self.session_factory.begin() as session:
                tokens_db.record_call(
                    session, principal.name, principal.role.value, method, path, status
                )
        except Exception:  # the call itself happened; a lost audit line must be visible
            log.exception("could not record %s %s by %s in the audit log", method, path, principal)


def _credentials(scope: Scope) -> str | None:
    """The bearer token of the request, or its `ade_token` cookie."""
    cookie: str | None = None
    headers: list[tuple[bytes, bytes]] = scope.get("headers") or []
    for name, value in headers:
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                return token.strip()
        elif name == b"cookie":
            jar: SimpleCookie = SimpleCookie()
            try:
                jar.load(value.decode("latin-1"))
            except CookieError:  # a malformed Cookie header carries no token
                continue
            if COOKIE in jar:
                cookie = str(jar[COOKIE].value)
    return cookie or None


async def _refuse(scope: Scope, send: Send, status: int, title: str, detail: str) -> None:
    """A problem+json refusal; the web UI's pages redirect to the login form instead."""
    if scope["path"].startswith("/ui") and scope["method"] in SAFE_METHODS:
        headers = [(b"location", b"/ui/login"), (b"content-length", b"0")]
        await send({"type": "http.response.start", "status": 303, "headers": headers})
        await send({"type": "http.response.body", "body": b""})
        return
    body = json.dumps({"type": "about:blank", "title": title, "status": status, "detail": detail})
    headers = [
        (b"content-type", b"application/problem+json"),
        (b"content-length", str(len(body)).encode()),
    ]
    if status == 401:
        headers.append((b"www-authenticate", b'Bearer realm="ade-tasks"'))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body.encode()})
