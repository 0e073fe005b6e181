"""The FastAPI application factory."""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from http import HTTPStatus

from celery import Celery
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, Response
from fastapi_offline import FastAPIOffline
from sqlalchemy.exc import DataError
from starlette.exceptions import HTTPException as StarletteHTTPException

from ade_api.http import problems
from ade_api.http.auth import AuthMiddleware, required_role
from ade_api.http.body_limits import BodyLimitMiddleware
from ade_api.http.db_faults import DatabaseFaultMiddleware, RoutesReached
from ade_api.http.delivery_intake import EventIntake
from ade_api.http.deps import Services
from ade_api.http.health_watch import HealthWatch
from ade_api.http.problems import status_of
from ade_api.http.routes import (
    actions,
    admin,
    backfill,
    cluster_view,
    health,
    ingress,
    metrics,
    operations,
    pauses,
    rule_enabling,
    rule_push,
    rule_runs,
    rule_schedule,
    rule_versions,
    rules,
    runs,
    scheduled,
    usage,
    webhooks,
)
from ade_api.http.schemas.problem import Problem
from ade_api.http.web import controls as web_controls
from ade_api.http.web import events as web_events
from ade_api.http.web import pages as web_pages
from ade_api.http.web import routes as web_routes
from ade_api.http.web import rule_source as web_rule_source
from ade_api.http.web import rules as web_rules
from ade_api.http.web import run_actions as web_run_actions
from ade_api.http.web import run_form as web_run_form
from ade_tasks.db.engine import SessionFactory, create_db_engine, create_session_factory
from ade_tasks.errors import AdeError
from ade_tasks.json_document import JsonObject
from ade_tasks.runs.senders import TaskSender
from ade_tasks.settings import Settings
from ade_workers.celery.app import CelerySender, create_celery_app

log = logging.getLogger(__name__)

PROBLEM = "application/problem+json"
#: Where the Swagger UI and ReDoc scripts, styles and favicon of /docs and /redoc are served.
OPENAPI_ASSETS = "/ui/static/openapi"
INTERNAL = (
    "an internal error stopped this request (it is logged on the API's side); try again, and "
    "report it with the time of the request if it persists"
)


def problem(status: int, title: str, detail: str) -> JSONResponse:
    """An error response as problem+json (`Retry-After` on a 503)."""
    return problems.problem(status, title, detail)


async def _internal_error(request: Request, _exc: Exception) -> Response:
    """Whatever no other handler took (Starlette's last resort, after which it still logs the
    traceback): a 500 problem+json, or the web page's error page, never plain text."""
    if request.url.path.startswith("/ui") and not request.url.path.startswith("/ui/static/"):
        return web_pages.error_page(request, AdeError(INTERNAL))
    return problem(500, "Internal Error", INTERNAL)


async def _ade_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, AdeError)
    known = status_of(exc)
    if known is None:
        log.error("unhandled ADE error: %s", exc)
        return problem(500, "Internal Error", exc.message)
    return problem(*known, exc.message)


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    """Starlette's own errors (a body that is not JSON, a method not allowed) as problems,
    keeping the headers they carry. A 405 says which methods the path takes (`Allow`, which
    RFC 9110 requires of a 405): every method of every route of the path, since Starlette's
    own header names only the first route it matched (`GET /api/v1/rules` but not `POST`)."""
    assert isinstance(exc, StarletteHTTPException)
    headers = dict(exc.headers or {})
    if exc.status_code == 405:
        methods = _methods_of(request.app, request.url.path)
        if methods:
            headers["Allow"] = ", ".join(sorted(methods))
    return problems.problem(
        exc.status_code, HTTPStatus(exc.status_code).phrase, str(exc.detail), headers
    )


def _methods_of(app: FastAPI, path: str) -> set[str]:
    """The methods the API's documented operations take on `path` (its OpenAPI schema, the
    routes as the server declares them), read once per app."""
    table: list[tuple[re.Pattern[str], set[str]]] | None = getattr(app.state, "methods_of", None)
    if table is None:
        table = [
            (_template_pattern(template), {method.upper() for method in operations})
            for template, operations in app.openapi()["paths"].items()
        ]
        app.state.methods_of = table
    return {method for pattern, methods in table if pattern.match(path) for method in methods}


def _template_pattern(template: str) -> re.Pattern[str]:
    """`/api/v1/runs/{run_id}` as a pattern of the paths it serves (a parameter: one segment)."""
    return re.compile("^" + re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(template)) + "$")


async def _unstorable(_request: Request, exc: Exception) -> JSONResponse:
    """A value the database refuses (an id beyond 64 bits, a NUL character in JSON text) is
    the request's fault: a 422 naming the database's reason, not a 500."""
    assert isinstance(exc, DataError)
    reason = str(exc.orig).splitlines()[0] if exc.orig is not None else "invalid value"
    return problem(
        422,
        "Invalid Request",
        f"the request holds a value the database cannot store ({reason}); ids are positive "
        "64-bit integers and text must not contain NUL (\\u0000) characters",
    )


async def _validation_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    parts = []
    for error in exc.errors():
        where = ".".join(str(p) for p in error["loc"])
        parts.append(f"{where}: {error['msg']}")
    return problem(422, "Invalid Request", "; ".join(parts))


def create_app(
    settings: Settings,
    *,
    session_factory: SessionFactory | None = None,
    celery: Celery | None = None,
    sender: TaskSender | None = None,
) -> FastAPI:
    """The HTTP API; pass the session factory and Celery app to share them (embedded mode)."""
    if session_factory is None:
        session_factory = create_session_factory(create_db_engine(settings.effective_database_url))
    celery = celery or create_celery_app(settings, session_factory=session_factory)
    sender = sender or CelerySender(celery)
    services = Services(
        settings, session_factory, sender, celery, EventIntake(settings, session_factory, sender)
    )

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        watch = HealthWatch(session_factory, settings) if settings.notifications.routes else None
        if watch is not None:  # notifications of rule health changes (health_watch)
            watch.start()
        yield
        if watch is not None:
            watch.stop()
        await services.intake.close()  # publish the events still queued

    # /docs and /redoc load Swagger UI and ReDoc from the assets fastapi-offline ships, not a CDN,
    # so they work without internet. The assets sit under the web UI's open static prefix: the pages
    # are open (ade_api.http.auth.OPEN_PATHS) and a browser fetches their scripts with no token.
    app = FastAPIOffline(
        static_url=OPENAPI_ASSETS,
        lifespan=lifespan,
        title="ADE Tasks",
        version="0.1.0",
        description=(
            "Run history, rules and manual runs of an ADE Tasks cluster. Every call but the "
            "health probes and webhook deliveries needs `Authorization: Bearer <token>` "
            "(`ade-tasks tokens create`): viewer reads, operator acts, admin manages."
        ),
    )
    app.state.services = services
    app.add_exception_handler(AdeError, _ade_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(DataError, _unstorable)
    app.add_exception_handler(Exception, _internal_error)
    # Routes are matched in order: webhook deliveries, the busiest, are looked up first.
    app.include_router(webhooks.router)
    app.include_router(health.router)
    app.include_router(cluster_view.router)
    app.include_router(rules.router)
    app.include_router(rule_push.router)
    app.include_router(rule_enabling.router)
    app.include_router(rule_versions.router)
    app.include_router(rule_schedule.router)
    app.include_router(rule_runs.router)
    app.include_router(pauses.router)
    app.include_router(backfill.router)
    app.include_router(runs.router)
    app.include_router(scheduled.router)
    app.include_router(operations.router)
    app.include_router(ingress.router)
    app.include_router(admin.router)
    app.include_router(metrics.router)
    app.include_router(usage.router)
    app.include_router(actions.router)
    app.include_router(web_routes.router)
    app.include_router(web_rules.router)
    app.include_router(web_run_form.router)
    app.include_router(web_controls.router)
    app.include_router(web_events.router)
    app.include_router(web_run_actions.router)
    app.include_router(web_rule_source.router)
    # Innermost (added first): marks a request that got past every middleware
    # (ade_api.http.db_faults).
    app.add_middleware(RoutesReached)
    # A call without a good enough token reaches no route (see ade_api.http.auth).
    app.add_middleware(
        AuthMiddleware, session_factory=session_factory, metrics_public=settings.metrics_public
    )
    # Around auth: a request whose database connection died is run again when that is safe,
    # else answered 503 with Retry-After, also when the token lookup met the fault.
    app.add_middleware(DatabaseFaultMiddleware)
    # Before anything reads or keeps a body: its size and JSON depth caps
    # (ade_api.http.body_limits).
    app.add_middleware(BodyLimitMiddleware)
    app.openapi = partial(_openapi_with_security, app, settings.metrics_public)  # type: ignore[method-assign]
    return app


UNAVAILABLE: JsonObject = {
    "description": "the database (or the broker) is unavailable: try again after `Retry-After`",
    "headers": {"Retry-After": {"description": "seconds to wait", "schema": {"type": "integer"}}},
}


def _openapi_with_security(app: FastAPI, metrics_public: bool) -> JsonObject:
    """The OpenAPI document with the bearer scheme and, per operation, the role it needs and
    its 401/403 answers (and the 503 of a database fault), so a generated client knows what to
    send and what to expect."""
    if app.openapi_schema:
        return app.openapi_schema
    schema = get_openapi(
        title=app.title, version=app.version, description=app.description, routes=app.routes
    )
    components = schema.setdefault("components", {})
    components.setdefault("securitySchemes", {})["bearerToken"] = {
        "type": "http",
        "scheme": "bearer",
        "description": "a token from `ade-tasks tokens create`",
    }
    as_problem = {"application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}}
    components.setdefault("schemas", {}).setdefault("Problem", Problem.model_json_schema())
    for path, item in schema.get("paths", {}).items():
        for method, operation in item.items():
            responses = operation.setdefault("responses", {})
            # Every error is a problem document (see `problem`), whatever FastAPI assumed.
            for code, response in responses.items():
                if code.startswith(("4", "5")):
                    response["content"] = as_problem
            if path not in ("/healthz", "/readyz"):  # ade_api.http.db_faults
                responses.setdefault("503", UNAVAILABLE | {"content": as_problem})
            if "requestBody" in operation:
                responses.setdefault(
                    "400", {"description": "the body is not JSON", "content": as_problem}
                )
                responses.setdefault(
                    "422", {"description": "the body is invalid", "content": as_problem}
                )
                responses.setdefault(  # ade_api.http.body_limits
                    "413", {"description": "the body is over its size cap", "content": as_problem}
                )
            needed = required_role(method.upper(), path, metrics_public=metrics_public)
            if needed is None:
                continue
            operation["security"] = [{"bearerToken": []}]
            operation["description"] = (
                f"{operation.get('description', '')}\n\nNeeds the `{needed.value}` role."
            ).strip()
            responses.setdefault(
                "401", {"description": "no token, or unknown/revoked", "content": as_problem}
            )
            responses.setdefault(
                "403", {"description": "the token's role is too low", "content": as_problem}
            )
    app.openapi_schema = schema
    return schema


def app_from_environment() -> FastAPI:
    """The API as `ade-tasks api --workers N` serves it: each uvicorn worker process builds its
    own app (and engine) from the `ADE_*` environment."""
    from ade_tasks.settings import get_settings

    settings = get_settings()
    engine = create_db_engine(
        settings.effective_database_url, pool_size=settings.db_pool_size, max_overflow=0
    )
    return create_app(settings, session_factory=create_session_factory(engine))
