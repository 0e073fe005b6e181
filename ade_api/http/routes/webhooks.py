"""Webhook ingress: GitHub and custom hooks. Each request verifies, size-checks and stores the
delivery (one durable write) and answers 202; the ingress workers match and dispatch it.

Custom hooks run their checks in this order: token, hook, size, age, signature, rate, filters,
duplicate. Every outcome lands in the hook's delivery log (body up to 64 KiB, credentials
redacted), on one of two rings of 50: deliveries refused before they passed authentication
(token, size, age, signature) count on the hook's `rejected_per_minute` and are logged apart
from authentic ones, which alone count on `rate_per_minute`; so forgeries can never get an
authentic delivery refused or push it out of the log (`ade_tasks.hooks.config`).

The GitHub endpoint has no rate limit or delivery log for forgeries to use up: a delivery whose
signature does not verify is answered 401 and leaves nothing behind.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import datetime

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse

from ade_api.http.deps import Services, ServicesDep, SessionDep
from ade_api.http.schemas.ingress import HookDeliveryOut
from ade_api.http.schemas.problem import Problem, Responses
from ade_tasks.clock import utcnow
from ade_tasks.db import ingress as ingress_db
from ade_tasks.db.retry import retrying
from ade_tasks.hooks.config import HookConfig, delivery_id, filters_match, redact_headers
from ade_tasks.hooks.signatures import SignatureError, verify_github, verify_hook, verify_token
from ade_tasks.ingress import intake
from ade_tasks.ingress.github import normalize
from ade_tasks.settings import Settings

router = APIRouter(prefix="/api/v1/webhooks", tags=["webhooks"])
PROBLEM = "application/problem+json"
ERRORS: Responses = {code: {"model": Problem} for code in (400, 401, 404, 408, 413, 429)}


class BodyError(Exception):
    """The body could not be read within the limits: answer `status` with `detail`."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


async def read_body(request: Request, limit: int, timeout: float) -> bytes:
    """The raw body, refused with 413 as soon as it passes `limit` (a Content-Length above it
    is refused before reading anything; a chunked body stops being read at the limit) and with
    408 when it has not fully arrived after `timeout` seconds (a slow drip)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BodyError(413, f"the body is {declared} bytes; this endpoint takes at most {limit}")
    chunks: list[bytes] = []
    size = 0

    async def collect() -> None:
        nonlocal size
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise BodyError(413, f"the body is over {limit} bytes; nothing was stored")
            chunks.append(chunk)

    try:
        await asyncio.wait_for(collect(), timeout)
    except TimeoutError:
        raise BodyError(
            408, f"the body did not arrive within {timeout:g} s; nothing was stored"
        ) from None
    return b"".join(chunks)


def problem(status: int, title: str, detail: str) -> JSONResponse:
    """An error answer as problem+json."""
    body = {"type": "about:blank", "title": title, "status": status, "detail": detail}
    return JSONResponse(body, status_code=status, media_type=PROBLEM)


TITLES = {
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    408: "Request Timeout",
    413: "Content Too Large",
    429: "Too Many Requests",
}


@dataclass(frozen=True)
class GithubDelivery:
    """A GitHub delivery whose signature verified: its raw body, event name and id."""

    body: bytes
    event: str
    delivery: str


async def verified_github_delivery(
    request: Request, settings: Settings
) -> GithubDelivery | JSONResponse:
    """Read a GitHub delivery under ADE_GITHUB__MAX_BODY_BYTES and verify it against
    ADE_GITHUB__WEBHOOK_SECRET: the delivery, or the answer to give instead (the refusal, or
    the pong to a `ping`). The cluster's route and the relay's share it."""
    try:
        body = await read_body(
            request, settings.github.max_body_bytes, settings.ingress_read_timeout
        )
    except BodyError as exc:
        return problem(exc.status, TITLES[exc.status], exc.detail)
    secret = settings.github.webhook_secret
    try:
        verify_github(
            secret.get_secret_value().encode() if secret else b"",
            body,
            request.headers.get("x-hub-signature-256"),
            legacy_sha1=request.headers.get("x-hub-signature"),
        )
    except SignatureError as exc:
        return problem(401, "Unauthorized", exc.message)
    event_name = request.headers.get("x-github-event", "")
    delivery = request.headers.get("x-github-delivery", "")
    if not event_name or not delivery:
        return problem(400, "Bad Request", "X-GitHub-Event and X-GitHub-Delivery are required")
    if event_name == "ping":
        return JSONResponse({"pong": True, "delivery": delivery}, status_code=200)
    return GithubDelivery(body, event_name, delivery)


@router.post("/github", status_code=202, responses=ERRORS)
async def github_webhook(request: Request, services: ServicesDep) -> JSONResponse:
    """A GitHub delivery: verified against ADE_GITHUB__WEBHOOK_SECRET, deduplicated by
    X-GitHub-Delivery and by body hash, stored, and handed to the ingress workers."""
    delivered = await verified_github_delivery(request, services.settings)
    if isinstance(delivered, JSONResponse):
        return delivered
    body, event_name, delivery = delivered.body, delivered.event, delivered.delivery
    try:
        payload = intake.parse_json(body)
        event = normalize(event_name, delivery, payload)
    except ValueError as exc:
        await run_in_threadpool(
            intake.store_malformed,
            services.session_factory,
            source=intake.GITHUB,
            delivery_id=delivery,
            error=str(exc),
        )
        return problem(400, "Bad Request", f"{exc}; the delivery was recorded as failed")
    event_id = await services.intake.store(intake.github_row(event, delivery, body))
    return _accepted(event_id, event.trigger_type)


@router.post("/{hook_id}", status_code=202, responses=ERRORS)
async def custom_webhook(
    hook_id: str, request: Request, services: ServicesDep, token: str | None = None
) -> JSONResponse:
    """A delivery to a custom hook configured in ADE_HOOKS__<hook_id>; rules with a
    `webhook` trigger naming the hook (and whose `filters` fit the body) run."""
    hook = services.settings.hooks.get(hook_id)
    now = utcnow()
    # token: a hook with tokens refuses a wrong one before anything else is looked at (and
    # `verify_hook`, the one verification of a custom hook, checks it again with the rest).
    if hook is not None and (hook.tokens or hook.scheme == "token"):
        try:
            verify_token(hook, token)
        except SignatureError as exc:
            return await _reject(services, hook_id, hook, request, b"", now, 401, exc.message)
    if hook is None:  # hook
        return problem(404, "Not Found", f"no webhook {hook_id!r} is configured (ADE_HOOKS__)")
    try:  # size
        body = await read_body(request, hook.max_body_bytes, services.settings.ingress_read_timeout)
    except BodyError as exc:
        return await _reject(services, hook_id, hook, request, b"", now, exc.status, exc.detail)
    try:  # age, signature: each timestamped scheme checks its age before the HMAC
        verify_hook(hook, body, request.headers, now, token)
    except SignatureError as exc:
        return await _reject(services, hook_id, hook, request, body, now, 401, exc.message)
    count = await run_in_threadpool(_count, services, hook_id, now)  # rate
    if count > hook.rate_per_minute:
        detail = f"hook {hook_id!r} takes {hook.rate_per_minute} deliveries a minute; retry later"
        return await _refuse(services, hook_id, hook, request, body, 429, detail, retry=True)
    try:
        document = intake.parse_json(body)
    except ValueError as exc:
        return await _refuse(services, hook_id, hook, request, body, 400, str(exc))
    matched, why = filters_match(hook.filters, document)  # filters
    if not matched:
        await _log(services, hook_id, hook, request, body, 202, f"ignored: {why}", None)
        return JSONResponse({"ignored": why}, status_code=202)
    sender_id = delivery_id(hook, request.headers)  # duplicate
    event_id = await services.intake.store(intake.hook_row(hook_id, sender_id, document))
    outcome = "accepted" if event_id else "duplicate"
    await _log(services, hook_id, hook, request, body, 202 if event_id else 200, outcome, event_id)
    return _accepted(event_id, "webhook")


@router.get("/{hook_id}/deliveries")
def hook_deliveries(
    hook_id: str, session: SessionDep, rejected: bool | None = None
) -> list[HookDeliveryOut]:
    """The hook's delivery log, newest first, with what became of each: the newest 50
    deliveries that passed authentication and the newest 50 refused before they did
    (`rejected`); `?rejected=false` or `?rejected=true` reads one of the two."""
    rows = ingress_db.list_deliveries(session, hook_id, rejected=rejected)
    return [HookDeliveryOut.model_validate(row) for row in rows]


def _accepted(event_id: int | None, trigger_type: str | None) -> JSONResponse:
    """202 with the stored event's id (its status is `received` until a worker dispatches it),
    or 200 for a duplicate."""
    if event_id is None:
        return JSONResponse({"duplicate": True, "stored": False}, status_code=200)
    body = {"event_id": event_id, "trigger_type": trigger_type, "status": "received"}
    return JSONResponse(body, status_code=202)


def _count(services: Services, hook_id: str, now: datetime) -> int:
    # Safe to repeat on a fresh connection: an attempt whose connection died before its COMMIT
    # counted nothing. One whose COMMIT took effect but whose answer was lost counts this
    # delivery twice in its minute: the hook's budget for that minute is one delivery smaller,
    # as it would be after a 503 and the sender's redelivery.
    return retrying(
        services.session_factory,
        lambda session: ingress_db.count_delivery(session, hook_id, now),
        what=f"counting a delivery to hook {hook_id!r}",
    )


async def _reject(
    services: Services,
    hook_id: str,
    hook: HookConfig,
    request: Request,
    body: bytes,
    now: datetime,
    status: int,
    detail: str,
) -> JSONResponse:
    """Refuse a delivery that did not pass authentication: counted on the hook's rejected
    window and logged on its rejected ring, never on the authentic deliveries' budget; over
    `rejected_per_minute` it is answered 429 and not logged."""
    headers = redact_headers(request.headers, [hook.header])
    sender_id = delivery_id(hook, request.headers)

    def write() -> bool:
        with services.session_factory.begin() as session:
            return ingress_db.log_rejected(
                session,
                hook_id=hook_id,
                now=now,
                limit=hook.rejected_per_minute,
                status_code=status,
                outcome=f"refused: {detail}",
                delivery_id=sender_id,
                headers=headers,
                body=body,
            )

    if not await run_in_threadpool(write):
        detail = (
            f"more than {hook.rejected_per_minute} deliveries to hook {hook_id!r} failed "
            "authentication this minute; check the sender's secret, then retry later"
        )
        status = 429
    response = problem(status, TITLES[status], detail)
    if status == 429:
        response.headers["Retry-After"] = "60"
    return response


async def _refuse(
    services: Services,
    hook_id: str,
    hook: HookConfig,
    request: Request,
    body: bytes,
    status: int,
    detail: str,
    *,
    retry: bool = False,
) -> JSONResponse:
    await _log(services, hook_id, hook, request, body, status, f"refused: {detail}", None)
    response = problem(status, TITLES[status], detail)
    if retry:
        response.headers["Retry-After"] = "60"
    return response


async def _log(
    services: Services,
    hook_id: str,
    hook: HookConfig,
    request: Request,
    body: bytes,
    status: int,
    outcome: str,
    event_id: int | None,
) -> None:
    headers = redact_headers(request.headers, [hook.header])
    sender_id = delivery_id(hook, request.headers)

    def write() -> None:
        with services.session_factory.begin() as session:
            ingress_db.log_delivery(
                session,
                hook_id=hook_id,
                status_code=status,
                outcome=outcome,
                delivery_id=sender_id,
                event_id=event_id,
                headers=headers,
                body=body,
            )

    await run_in_threadpool(write)
