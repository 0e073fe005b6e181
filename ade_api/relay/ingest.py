"""The relay's webhook routes: verify a delivery as the cluster would, then keep it.

The paths are the cluster's own (`POST /api/v1/webhooks/github`, `POST /api/v1/webhooks/{hook}`),
so moving GitHub's webhook from the cluster to the relay changes only its host. Verification is
the cluster's code (`ade_tasks.hooks.signatures`: ADE_GITHUB__WEBHOOK_SECRET, the hooks of
ADE_HOOKS__*), under the same body caps and read timeout (`ADE_GITHUB__MAX_BODY_BYTES`, a hook's
`max_body_bytes`, `ADE_INGRESS_READ_TIMEOUT`).

What the relay does not do: parse or match the body (the cluster's intake does, and records a
body it cannot read as a failed event), or keep hook rate windows and delivery logs (those live
in the cluster's database; the cluster logs each relayed hook delivery as it drains it). A
delivery that fails verification is answered 401 and leaves nothing behind.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse

from ade_api.http.routes.webhooks import (
    ERRORS,
    TITLES,
    BodyError,
    problem,
    read_body,
    verified_github_delivery,
)
from ade_api.relay.wake import WakeHub
from ade_tasks.clock import utcnow
from ade_tasks.db.engine import SessionFactory
from ade_tasks.hooks.config import delivery_id
from ade_tasks.hooks.signatures import SignatureError, verify_hook
from ade_tasks.ingress import intake
from ade_tasks.relay import store
from ade_tasks.settings import Settings

router = APIRouter(prefix="/api/v1/webhooks", tags=["relay"])


@dataclass
class RelayServices:
    """What the relay's routes share: settings, the relay's database, the wake-up hub."""

    settings: Settings
    session_factory: SessionFactory
    hub: WakeHub


def services_of(request: Request) -> RelayServices:
    """The relay's services (set on the app's state by `create_relay_app`)."""
    services: RelayServices = request.app.state.relay
    return services


@router.post("/github", status_code=202, responses=ERRORS)
async def github_delivery(request: Request) -> JSONResponse:
    """A GitHub delivery: verified against ADE_GITHUB__WEBHOOK_SECRET and kept for the drain."""
    services = services_of(request)
    delivered = await verified_github_delivery(request, services.settings)
    if isinstance(delivered, JSONResponse):
        return delivered
    return await _keep(services, intake.GITHUB, delivered.delivery, delivered.event, delivered.body)


@router.post("/{hook_id}", status_code=202, responses=ERRORS)
async def hook_delivery(hook_id: str, request: Request, token: str | None = None) -> JSONResponse:
    """A delivery to a custom hook of ADE_HOOKS__<hook_id>, verified by its scheme and kept."""
    services = services_of(request)
    hook = services.settings.hooks.get(hook_id)
    if hook is None:
        return problem(404, "Not Found", f"no webhook {hook_id!r} is configured (ADE_HOOKS__)")
    try:
        body = await read_body(request, hook.max_body_bytes, services.settings.ingress_read_timeout)
    except BodyError as exc:
        return problem(exc.status, TITLES[exc.status], exc.detail)
    try:
        verify_hook(hook, body, request.headers, utcnow(), token)
    except SignatureError as exc:
        return problem(401, "Unauthorized", exc.message)
    source = f"{intake.HOOK_PREFIX}{hook_id}"
    return await _keep(services, source, delivery_id(hook, request.headers), None, body)


async def _keep(
    services: RelayServices, source: str, delivery: str | None, event: str | None, body: bytes
) -> JSONResponse:
    """Store a verified delivery, wake the drains, answer 202 (200 for a repeated id)."""
    cursor = await run_in_threadpool(
        partial(_store, services, source=source, delivery=delivery, event=event, body=body)
    )
    if cursor is None:
        return JSONResponse({"duplicate": True, "stored": False}, status_code=200)
    services.hub.notify(cursor)
    return JSONResponse({"cursor": cursor, "stored": True}, status_code=202)


def _store(
    services: RelayServices, *, source: str, delivery: str | None, event: str | None, body: bytes
) -> int | None:
    now = utcnow()
    with services.session_factory.begin() as session:
        cursor = store.store(
            session, source=source, delivery_id=delivery, event=event, body=body, now=now
        )
        if cursor is not None and store.prune_due(cursor):
            store.prune(session, now, services.settings.relay.retention())
    return cursor
