"""The webhook benchmark's baseline: a minimal endpoint that checks X-Hub-Signature-256 (HMAC-SHA256
of the raw body), LPUSHes the body to a Redis list and answers 202, served the way
`ade-tasks api --workers N` serves ADE (`bench/webhooks.py --serve-minimal --port P --processes N`
runs `serve_minimal` in a child process)."""

from __future__ import annotations

import hashlib
import hmac
import os

import redis.asyncio
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from ade_api.cli.serve import serve
from bench.webhooks_load import PATH

MINIMAL_KEY = "bench:webhooks:minimal"
SECRET_ENV = "BENCH_WEBHOOKS_SECRET"
REDIS_ENV = "BENCH_WEBHOOKS_REDIS_URL"


def minimal_app(secret: bytes, redis_url: str) -> FastAPI:
    """Verify X-Hub-Signature-256 over the raw body, LPUSH the body, answer 202."""
    store = redis.asyncio.Redis.from_url(redis_url)
    app = FastAPI()

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.post(PATH, status_code=202)
    async def github(request: Request) -> JSONResponse:
        body = await request.body()
        expected = "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()
        if not hmac.compare_digest(expected, request.headers.get("x-hub-signature-256", "")):
            return JSONResponse({"detail": "bad signature"}, status_code=401)
        await store.lpush(MINIMAL_KEY, body)
        return JSONResponse({"queued": True}, status_code=202)

    return app


def minimal_from_environment() -> FastAPI:
    """The minimal endpoint as each of its uvicorn worker processes builds it."""
    return minimal_app(os.environ[SECRET_ENV].encode(), os.environ[REDIS_ENV])


def serve_minimal(port: int, processes: int) -> None:
    """Serve the minimal endpoint the way `ade-tasks api --workers N` serves ADE's: the same
    uvicorn processes (`ade_api.cli.serve`: one SO_REUSEPORT socket each) and access log (off)."""
    serve(
        "bench.webhooks_minimal:minimal_from_environment",
        workers=processes,
        host="127.0.0.1",
        port=port,
        log_level="info",
        access_log=False,
    )
