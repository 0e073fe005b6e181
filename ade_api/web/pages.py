"""Rendering the web page's Jinja2 templates (`templates/*.html`): one environment with
autoescape on for every template and undefined names as errors, the filters the templates use,
and the security headers every page carries."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

from fastapi import Request
from fastapi.responses import HTMLResponse
from jinja2 import Environment, FileSystemLoader, StrictUndefined
from starlette.templating import Jinja2Templates

from ade_api.auth import Principal
from ade_api.web.charts import duration_text
from ade_tasks.roles import Role

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


def pretty_json(value: Any, limit: int = MAX_JSON_CHARS) -> str:
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
    """Who is logged in (set by `ade_api.auth.AuthMiddleware`), if anyone."""
    principal: Principal | None = getattr(request.state, "principal", None)
    return principal


def can_act(request: Request) -> bool:
    """May the caller change things (operator or admin)? Only then are the buttons shown."""
    principal = principal_of(request)
    return principal is not None and principal.role.rank >= Role.OPERATOR.rank


def render(
    request: Request,
    template: str,
    title: str,
    *,
    status_code: int = 200,
    live: bool = False,
    **context: Any,
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
            **context,
        },
        status_code=status_code,
        headers=SECURITY_HEADERS,
    )
    return response
