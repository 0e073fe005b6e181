"""Rendering the web page's Jinja2 templates (`templates/*.html`): one environment with
autoescape on for every template and undefined names as errors, the filters the templates use,
the security headers and the kill-switch banner every page carries; and what every page's
route does with its request (its services, its posted form, a read session, the redirect after
a POST, the error page)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from datetime import datetime
from pathlib import Path
from typing import TypeVar
from urllib.parse import parse_qsl

from fastapi import Request
from fastapi.responses import HTMLResponse, RedirectResponse
from jinja2 import Environment, FileSystemLoader, StrictUndefined
from sqlalchemy.orm import Session
from starlette.templating import Jinja2Templates

from ade_api.http.auth import Principal
from ade_api.http.deps import Services
from ade_api.http.problems import retry_after, status_of
from ade_api.http.web.charts import duration_text
from ade_tasks.access.roles import Role
from ade_tasks.errors import AdeError
from ade_tasks.runs.dispatch import AUTOMATIONS_DISABLED

log = logging.getLogger(__name__)
T = TypeVar("T")

TEMPLATES_DIR = Path(__file__).parent / "templates"
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
MAX_JSON_CHARS = 4000


def when(value: datetime | None) -> str:
    """A timestamp as the pages show it (UTC, to the second); `-` for none."""
    return "-" if value is None else value.strftime("%Y-%m-%d %H:%M:%S UTC")


def pretty_json(value: object, limit: int = MAX_JSON_CHARS) -> str:
    """Indented JSON, cut at `limit` characters with a note of how much was left out."""
    text = json.dumps(value, indent=2, sort_keys=True, default=str)
    return text if len(text) <= limit else text[:limit] + f"\n… ({len(text) - limit} more chars)"


def _environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(TEMPLATES_DIR),
        autoescape=True,  # every template, whatever its name: data is never markup
        undefined=StrictUndefined,  # a misspelt name fails the test that renders it
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(when=when, duration=duration_text, pretty_json=pretty_json)
    return env


TEMPLATES = Jinja2Templates(env=_environment())


def principal_of(request: Request) -> Principal | None:
    """Who is logged in (set by `ade_api.http.auth.AuthMiddleware`), if anyone."""
    principal: Principal | None = getattr(request.state, "principal", None)
    return principal


def can_act(request: Request) -> bool:
    """May the caller change things (operator or admin)? Only then are the buttons shown."""
    principal = principal_of(request)
    return principal is not None and principal.role.rank >= Role.OPERATOR.rank


def is_admin(request: Request) -> bool:
    """Is the caller an admin (who may force a run past the kill switch, or enable a rule)?"""
    principal = principal_of(request)
    return principal is not None and principal.role.rank >= Role.ADMIN.rank


def automations_disabled(request: Request) -> bool:
    """Is the cluster's kill switch (ADE_DISABLE_AUTOMATIONS) on, as this API process runs?"""
    app = request.scope.get("app")  # none for a page answered outside the app (db_faults)
    services: Services | None = getattr(app.state, "services", None) if app else None
    return services is not None and services.settings.disable_automations


def render(
    request: Request,
    template: str,
    title: str,
    *,
    status_code: int = 200,
    live: bool = False,
    **context: object,
) -> HTMLResponse:
    """A page: `template` with `context`, the layout's title and nav, the security headers."""
    response: HTMLResponse = TEMPLATES.TemplateResponse(
        request,
        template,
        {
            "title": title,
            "principal": principal_of(request),
            "can_act": can_act(request),
            "live": live,
            # the banner of every page while the kill switch is on, with what to do about it
            "kill_switch": AUTOMATIONS_DISABLED if automations_disabled(request) else "",
            **context,
        },
        status_code=status_code,
        headers=SECURITY_HEADERS,
    )
    return response


# --- what every route does with its request -----------------------------------------------------


def services_of(request: Request) -> Services:
    """The API process's services (settings, sessions, sender)."""
    services: Services = request.app.state.services
    return services


def read(request: Request, work: Callable[[Session], T]) -> T:
    """Run `work(session)` in a read-only session."""
    with services_of(request).session_factory() as session:
        return work(session)


async def posted_form(request: Request) -> dict[str, str]:
    """The posted urlencoded form (the last value of a repeated field wins)."""
    body = (await request.body()).decode("utf-8", errors="replace")
    return dict(parse_qsl(body, keep_blank_values=True))


def back_to(form: Mapping[str, str], default: str) -> str:
    """Where to return after a POST: a `/ui/` path the form named, else `default`."""
    target = form.get("back", "")
    ok = target.startswith("/ui/") and "//" not in target and "\\" not in target
    return target if ok else default


def redirect(url: str) -> RedirectResponse:
    """The 303 after a POST (or to a page's canonical address)."""
    return RedirectResponse(url, status_code=303, headers={"Cache-Control": "no-store"})


def error_page(request: Request, exc: AdeError) -> HTMLResponse:
    """The page for an ADE error: its status (404, 409, 422, 503 ...) and its message."""
    code, title = status_of(exc) or (500, "Error")
    if code == 500:
        log.error("web page: unhandled ADE error: %s", exc)
    page = render(request, "error.html", title, status_code=code, message=exc.message)
    page.headers.update(retry_after(code))  # a 503 (database, broker): when to try again
    return page
