"""Size and depth caps on request bodies, in front of every route but the webhook deliveries.

* A manual run (`POST /api/v1/rules/{id}/runs`, the web page's `POST /ui/rules/{id}/runs`)
  takes at most `MANUAL_RUN_BODY_BYTES` (64 KiB): its inputs are stored with the run and shown
  wherever the run is.
* A rules push (`POST /api/v1/rules/push`) takes at most `RULES_PUSH_BODY_BYTES` (16 MiB): a
  whole rules directory's files; a bigger directory is synced with `ade-tasks rules sync`.
* Every other request takes at most `API_BODY_BYTES` (2 MiB; a rule's YAML text may be
  1,000,000 characters).
* Webhook deliveries (`/api/v1/webhooks/...`) are read by their routes, under their own caps
  (`ADE_GITHUB__MAX_BODY_BYTES`, a hook's `max_body_bytes`) and read timeout.

A body over its cap is answered 413 problem+json before any route runs, from its Content-Length
when it declares one, else as soon as the bytes read pass the cap, so nothing is stored. A JSON
body nested deeper than `ade_tasks.limits.MAX_DEPTH` (64) levels is answered 400 problem+json
(Python's JSON parser would otherwise recurse until it fails).
"""

from __future__ import annotations

import re

from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ade_tasks.limits import MAX_DEPTH, DocumentLimitError, loads_json

MANUAL_RUN_BODY_BYTES = 64 * 1024
API_BODY_BYTES = 2 * 1024 * 1024
RULES_PUSH_BODY_BYTES = 16 * 1024 * 1024
RULES_PUSH = "/api/v1/rules/push"
MANUAL_RUN = re.compile(r"^/(?:api/v1|ui)/rules/[^/]+/runs/?$")
WEBHOOKS = "/api/v1/webhooks/"
PROBLEM = "application/problem+json"


class BodyTooLargeError(HTTPException):
    """A request body passed its cap while it was being read (answered 413)."""

    def __init__(self, detail: str) -> None:
        super().__init__(status_code=413, detail=detail)


def body_cap(path: str) -> tuple[int, str]:
    """The most bytes a request to `path` may send, and what takes that many."""
    if MANUAL_RUN.match(path):
        return MANUAL_RUN_BODY_BYTES, "a manual run's body (its inputs)"
    if path.rstrip("/") == RULES_PUSH:
        return RULES_PUSH_BODY_BYTES, "a rules push (sync a bigger directory with `rules sync`)"
    return API_BODY_BYTES, "an API request body"


def _too_large(limit: int, what: str, size: int | None = None) -> str:
    told = (
        f"the body is {size:,} bytes" if size is not None else f"the body is over {limit:,} bytes"
    )
    return f"{told}; {what} may be at most {limit:,} bytes; nothing was stored"


def _problem(status: int, title: str, detail: str) -> JSONResponse:
    body = {"type": "about:blank", "title": title, "status": status, "detail": detail}
    return JSONResponse(body, status_code=status, media_type=PROBLEM)


def _is_json(content_type: str | None) -> bool:
    media = (content_type or "").split(";", 1)[0].strip().lower()
    return media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    )


def _depth_problem(body: bytes) -> str | None:
    """Why a JSON body is refused for its nesting, if it is (malformed JSON is the route's)."""
    if body.count(b"[") + body.count(b"{") <= MAX_DEPTH:
        return None
    try:
        loads_json(body, what="the JSON body")
    except DocumentLimitError as exc:
        return exc.message
    except ValueError:
        return None
    return None


class BodyLimitMiddleware:
    """Pure ASGI middleware enforcing the caps above (see the module docstring)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"].startswith(WEBHOOKS):
            await self.app(scope, receive, send)
            return
        limit, what = body_cap(scope["path"])
        headers = Headers(scope=scope)
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            await _problem(413, "Content Too Large", _too_large(limit, what, int(declared)))(
                scope, receive, send
            )
            return
        if scope["method"] in ("POST", "PUT", "PATCH") and _is_json(headers.get("content-type")):
            await self._json(scope, receive, send, limit, what)
            return
        await self._counted(scope, receive, send, limit, what)

    async def _json(
        self, scope: Scope, receive: Receive, send: Send, limit: int, what: str
    ) -> None:
        """Read the whole (capped) body, refuse it if too deep, then hand it on."""
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] != "http.request":  # the client left
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                await _problem(413, "Content Too Large", _too_large(limit, what))(
                    scope, receive, send
                )
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        body = b"".join(chunks)
        problem = _depth_problem(body)
        if problem is not None:
            await _problem(400, "Bad Request", problem)(scope, receive, send)
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _counted(
        self, scope: Scope, receive: Receive, send: Send, limit: int, what: str
    ) -> None:
        """Hand the body on as it arrives, stopping it when it passes the cap."""
        size = 0
        started = False

        async def counting() -> Message:
            nonlocal size
            message = await receive()
            if message["type"] == "http.request":
                size += len(message.get("body", b""))
                if size > limit:
                    raise BodyTooLargeError(_too_large(limit, what))
            return message

        async def sending(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counting, sending)
        except BodyTooLargeError as exc:  # raised where no route's error handler caught it
            if started:
                raise
            await _problem(413, "Content Too Large", str(exc.detail))(scope, receive, send)
