"""`ade-tasks relay serve`: the public ingress for a cluster GitHub cannot reach.

An edge like the other commands: it reads the settings and runs `ade_api.relay.app` under
uvicorn (WebSockets through the `websockets` package). The drain is no command: the beats
drain the relay while ADE_RELAY__URL and ADE_RELAY__TOKEN are set.
"""

from __future__ import annotations

import logging

import click

from ade_api.cli.root import fail, main
from ade_tasks.settings import Settings


@main.group()
def relay() -> None:
    """The relay: verified webhook deliveries kept outside the firewall for the cluster."""


@relay.command("serve")
@click.option("--host", default=None, help="address to bind (default ADE_RELAY__HOST, 127.0.0.1)")
@click.option("--port", type=int, default=None, help="port (default ADE_RELAY__PORT, 8788)")
@click.pass_obj
def relay_serve(settings: Settings, host: str | None, port: int | None) -> None:
    """Verify GitHub and custom-hook deliveries and keep them for the cluster's beats to drain.

    Needs ADE_RELAY__TOKEN (the drains' token) and ADE_GITHUB__WEBHOOK_SECRET or ADE_HOOKS__*;
    its database is ADE_RELAY__DATABASE_URL (default SQLite at <ADE_DATA_DIR>/relay.db).
    """
    import uvicorn

    from ade_api.relay.app import create_relay_app
    from ade_tasks.errors import AdeError

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    try:
        app = create_relay_app(settings)
    except AdeError as exc:
        fail(exc.message)
    uvicorn.run(
        app,
        host=host or settings.relay.host,
        port=port or settings.relay.port,
        ws="websockets-sansio",
        access_log=settings.api_access_log,
        log_level="info",
    )
