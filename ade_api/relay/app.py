"""The relay's app: webhook routes (`ade_api.relay.ingest`), and for the cluster's drain
`GET /relay/v1/events` and the WebSocket `/relay/v1/wake`, both behind ADE_RELAY__TOKEN.

- `GET /relay/v1/events?after=CURSOR&limit=100`: the events after `after`, oldest first, at
  most `limit` (1 to 100) and about 8 MiB of bodies (`ade_tasks.relay.wire` has the format).
- `/relay/v1/wake`: after the upgrade the relay sends `{"type": "hello", "newest": N}`, then
  `{"type": "wake", "cursor": N}` whenever events up to N were stored; the drain reads the
  events themselves with `GET /relay/v1/events`.
- `GET /healthz`: `{"status": "ok", "listeners": N}` without a token (for load balancers;
  N is how many drains listen for wake-ups).

A request without `Authorization: Bearer <ADE_RELAY__TOKEN>` is answered 401 (the WebSocket
too, before the upgrade). The token is compared in constant time. Pruning
(`ADE_RELAY__RETENTION_DAYS`) runs at start and every 100 stored deliveries.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from typing import Annotated

from fastapi import Depends, FastAPI, Query, Request, WebSocket, WebSocketDisconnect
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from ade_api.http.body_limits import BodyLimitMiddleware
from ade_api.http.routes.webhooks import problem
from ade_api.relay.ingest import RelayServices, router, services_of
from ade_api.relay.wake import WakeHub
from ade_tasks.clock import utcnow
from ade_tasks.db.engine import create_db_engine, create_session_factory
from ade_tasks.errors import AdeError
from ade_tasks.relay import store
from ade_tasks.relay.wire import page_document
from ade_tasks.settings import Settings

log = logging.getLogger(__name__)

NO_TOKEN = (
    "the relay's token is missing or wrong: send `Authorization: Bearer <token>` with the "
    "ADE_RELAY__TOKEN the relay runs with"
)


class RelayConfigError(AdeError):
    """The relay cannot start with these settings."""


def token_matches(settings: Settings, authorization: str | None) -> bool:
    """Does an Authorization header carry the relay's token (compared in constant time)?"""
    expected = settings.relay.token
    scheme, _, given = (authorization or "").partition(" ")
    if expected is None or scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(expected.get_secret_value().encode(), given.strip().encode())


def require_token(request: Request) -> None:
    """A dependency answering 401 unless the request carries the relay's token."""
    if not token_matches(services_of(request).settings, request.headers.get("authorization")):
        raise HTTPException(401, NO_TOKEN)


def create_relay_app(settings: Settings) -> FastAPI:
    """The relay's ASGI app over its own database (created on start if missing)."""
    if settings.relay.token is None or not settings.relay.token.get_secret_value().strip():
        raise RelayConfigError(
            "ADE_RELAY__TOKEN is not set: the relay serves its events only to a drain that "
            "sends this token; set the same long random value on the relay and on the beats"
        )
    if settings.github.webhook_secret is None and not settings.hooks:
        log.warning(
            "neither ADE_GITHUB__WEBHOOK_SECRET nor ADE_HOOKS__* is set: every delivery is "
            "refused until one is"
        )
    engine = create_db_engine(settings.relay.effective_database_url(settings.data_dir))
    services = RelayServices(settings, create_session_factory(engine), WakeHub())

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        await run_in_threadpool(_start, services)
        yield
        engine.dispose()

    app = FastAPI(title="ADE Tasks relay", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.relay = services
    app.add_middleware(BodyLimitMiddleware)
    app.include_router(router)

    @app.exception_handler(HTTPException)
    async def http_problem(_request: Request, exc: HTTPException) -> JSONResponse:
        return problem(
            exc.status_code, "Unauthorized" if exc.status_code == 401 else "Error", str(exc.detail)
        )

    @app.get("/healthz")
    def healthz() -> dict[str, str | int]:
        """Liveness, without a token, and how many drains listen for wake-ups now."""
        return {"status": "ok", "listeners": services.hub.listeners}

    @app.get("/relay/v1/events", dependencies=[Depends(require_token)])
    def events(
        request: Request,
        after: Annotated[int, Query(ge=0)] = 0,
        limit: Annotated[int, Query(ge=1, le=store.PAGE_LIMIT)] = store.PAGE_LIMIT,
    ) -> JSONResponse:
        """The stored events after cursor `after`, oldest first."""
        with services_of(request).session_factory() as session:
            page = store.events_after(session, after, limit)
            newest = store.newest_cursor(session)
        return JSONResponse(page_document(page, newest))

    @app.websocket("/relay/v1/wake")
    async def wake(websocket: WebSocket) -> None:
        """Wake-ups for a drain: a message whenever new events are stored."""
        if not token_matches(settings, websocket.headers.get("authorization")):
            await websocket.send_denial_response(problem(401, "Unauthorized", NO_TOKEN))
            return
        await websocket.accept()
        queue = services.hub.listen()
        try:
            newest = await run_in_threadpool(_newest, services)
            await websocket.send_json({"type": "hello", "newest": newest})
            await _forward(websocket, queue)
        except WebSocketDisconnect:
            pass
        finally:
            services.hub.leave(queue)

    return app


async def _forward(websocket: WebSocket, queue: asyncio.Queue[int]) -> None:
    """Send each wake-up until the drain hangs up (whatever it sends is ignored)."""
    hangup = asyncio.ensure_future(websocket.receive())
    try:
        while True:
            wakeup = asyncio.ensure_future(queue.get())
            done, _ = await asyncio.wait({hangup, wakeup}, return_when=asyncio.FIRST_COMPLETED)
            if wakeup not in done:
                wakeup.cancel()
                message = hangup.result()
                if message["type"] == "websocket.disconnect":
                    return
                hangup = asyncio.ensure_future(websocket.receive())
                continue
            await websocket.send_json({"type": "wake", "cursor": wakeup.result()})
    finally:
        hangup.cancel()
        with suppress(asyncio.CancelledError, Exception):
            await hangup


def _start(services: RelayServices) -> None:
    store.create_schema(services.session_factory.kw["bind"])
    with services.session_factory.begin() as session:
        dropped = store.prune(session, utcnow(), services.settings.relay.retention())
    log.info("relay database ready (%d event(s) past retention dropped)", dropped)


def _newest(services: RelayServices) -> int:
    with services.session_factory() as session:
        return store.newest_cursor(session)
