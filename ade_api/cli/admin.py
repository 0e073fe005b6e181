"""CLI commands for admins: API tokens and the audit log.

`tokens` talk to the database directly (like `rules trust`): the first admin token has to be
made by someone who can reach the database, before any token exists to call the API with.
`audit` reads the log through the API with an admin token.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING

import click

from ade_api.cli.root import Api, fail, json_option, main, url_option
from ade_tasks.access.roles import Role
from ade_tasks.errors import AdeError
from ade_tasks.json_document import JsonObject
from ade_tasks.settings import Settings

if TYPE_CHECKING:  # the database modules load only for the commands that use them
    from ade_tasks.db.engine import SessionFactory
    from ade_tasks.db.schema import ApiTokenRow


def _sessions(settings: Settings) -> SessionFactory:
    from ade_tasks.db.engine import create_db_engine, create_session_factory

    return create_session_factory(create_db_engine(settings.effective_database_url))


def _token_data(row: ApiTokenRow) -> JsonObject:
    return {
        "id": row.id,
        "name": row.name,
        "role": row.role,
        "prefix": row.prefix,
        "created_at": row.created_at.isoformat(),
        "created_by": row.created_by,
        "last_used_at": row.last_used_at.isoformat() if row.last_used_at else None,
        "revoked_at": row.revoked_at.isoformat() if row.revoked_at else None,
    }


def _token_line(item: JsonObject) -> str:
    state = f"revoked {item['revoked_at'][:19]}" if item["revoked_at"] else "active"
    used = item["last_used_at"][:19] if item["last_used_at"] else "never"
    return (
        f"{item['id']:>4}  {item['name']:<24} {item['role']:<8} {item['prefix']}…  {state}, "
        f"last used {used}"
    )


@main.group()
def tokens() -> None:
    """API tokens (viewer, operator, admin); needs ADE_DATABASE_URL."""


@tokens.command("create")
@click.option("--name", required=True, help="who or what uses it (kept in the audit log)")
@click.option("--role", type=click.Choice([r.value for r in Role]), required=True)
@click.option("--by", default=lambda: os.environ.get("USER", "cli"), help="who creates it")
@json_option
@click.pass_obj
def tokens_create(settings: Settings, name: str, role: str, by: str, as_json: bool) -> None:
    """Create a token and print its secret (shown this once; only its hash is stored)."""
    from ade_tasks.db import tokens as tokens_db

    try:
        with _sessions(settings).begin() as session:
            row, secret = tokens_db.create_token(session, name, Role(role), by)
            data = _token_data(row)
    except AdeError as exc:
        fail(exc.message)
    if as_json:
        click.echo(json.dumps({**data, "token": secret}, indent=2))
        return
    click.echo(f"created token {data['id']} for {name} ({role}); it is shown only now:")
    click.echo(secret)
    click.echo("use it as `Authorization: Bearer <token>`, or export ADE_API_TOKEN for the CLI")


@tokens.command("list")
@json_option
@click.pass_obj
def tokens_list(settings: Settings, as_json: bool) -> None:
    """Every token (never a secret), revoked ones included."""
    from ade_tasks.db import tokens as tokens_db

    with _sessions(settings)() as session:
        items = [_token_data(row) for row in tokens_db.list_tokens(session)]
    if as_json:
        click.echo(json.dumps(items, indent=2))
        return
    for item in items:
        click.echo(_token_line(item))
    if not items:
        click.echo("(none) create one with `ade-tasks tokens create --name NAME --role admin`")


@tokens.command("revoke")
@click.argument("token_id", type=int)
@click.pass_obj
def tokens_revoke(settings: Settings, token_id: int) -> None:
    """Revoke a token at once."""
    from ade_tasks.db import tokens as tokens_db

    try:
        with _sessions(settings).begin() as session:
            click.echo(_token_line(_token_data(tokens_db.revoke_token(session, token_id))))
    except AdeError as exc:
        fail(exc.message, code=1)


@main.command("audit")
@click.option("--limit", type=click.IntRange(1, 500), default=50, show_default=True)
@url_option
@json_option
@click.pass_obj
def audit(settings: Settings, limit: int, url: str | None, as_json: bool) -> None:
    """The newest state-changing API calls: who, what, when (needs an admin token)."""
    items = Api(settings, url).call("GET", "/api/v1/audit", params={"limit": limit})
    if as_json:
        click.echo(json.dumps(items, indent=2))
        return
    for item in items:
        click.echo(
            f"{item['at'][:19]}  {item['actor']:<20} {item['role']:<8} {item['method']:<6} "
            f"{item['path']}  -> {item['status_code']}"
        )
