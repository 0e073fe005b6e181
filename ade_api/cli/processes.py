"""The long-running processes: `ade-tasks worker`, `beat` and `api` (each imports what it runs
only when it starts)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from ade_api.cli.root import fail, main

if TYPE_CHECKING:
    from ade_api.cli.serve import ServeOptions
    from ade_tasks.settings import Settings


@main.command("worker", context_settings={"ignore_unknown_options": True})
@click.option(
    "--queues", "-Q", default="ade.builtin,ade.agent,ade.control,ade.ingress", show_default=True
)
@click.option("--concurrency", "-c", type=int, default=None)
@click.option("--pool", "-P", default="prefork", show_default=True)
@click.option(
    "--metrics-port",
    type=click.IntRange(1, 65535),
    default=None,
    help="serve this worker's Prometheus metrics on this port (ADE_WORKER_METRICS_PORT)",
)
@click.argument("celery_args", nargs=-1, type=click.UNPROCESSED)
@click.pass_obj
def worker(
    settings: Settings,
    queues: str,
    concurrency: int | None,
    pool: str,
    metrics_port: int | None,
    celery_args: tuple[str, ...],
) -> None:
    """A Celery worker (extra arguments go to `celery worker`)."""
    from ade_workers.celery.app import create_celery_app

    if metrics_port is not None:
        settings = settings.model_copy(update={"worker_metrics_port": metrics_port})
    app = create_celery_app(settings, extra_queues=tuple(queues.split(",")))
    argv = [
        "worker",
        "-Q",
        queues,
        "-P",
        pool,
        "-c",
        str(concurrency or settings.worker_concurrency),
    ]
    app.worker_main([*argv, *celery_args])


@main.command("beat", context_settings={"ignore_unknown_options": True})
@click.argument("celery_args", nargs=-1, type=click.UNPROCESSED)
@click.pass_obj
def beat(settings: Settings, celery_args: tuple[str, ...]) -> None:
    """Celery beat: fires rule schedules and housekeeping; run as many as you like."""
    from ade_workers.celery.app import create_celery_app

    app = create_celery_app(settings)
    app.start(
        [
            "beat",
            "-S",
            "ade_workers.celery.beat:DatabaseScheduler",
            "--loglevel",
            "INFO",
            *celery_args,
        ]
    )


@main.command("api")
@click.option("--host", default=None)
@click.option("--port", type=int, default=None)
@click.option(
    "--workers",
    type=click.IntRange(1, 64),
    default=1,
    show_default=True,
    help="API processes (one per core serves webhooks fastest)",
)
@click.option(
    "--sync-rules/--no-sync-rules", default=True, help="load the rules directory at start-up"
)
@click.pass_obj
def api(
    settings: Settings, host: str | None, port: int | None, workers: int, sync_rules: bool
) -> None:
    """Serve the HTTP API."""
    from ade_tasks.rules.gc_pause import paused_gc

    with paused_gc():  # the API's imports: about 0.3 s less start-up without the collector
        import uvicorn

        from ade_api.cli.serve import serve
        from ade_api.http.app import app_from_environment
        from ade_api.http.header_timeout import HTTP_PROTOCOL
        from ade_tasks.db.engine import create_db_engine, create_session_factory
        from ade_tasks.errors import AdeError
        from ade_tasks.logs import uvicorn_log_config
        from ade_tasks.rule_files.sync import sync_rules_dir

    if sync_rules:
        factory = create_session_factory(create_db_engine(settings.effective_database_url))
        loaded, _ = sync_rules_dir(factory, settings.rules_dir)
        for problem in loaded.problems:
            click.echo(f"rule problem: {problem}", err=True)
    host, port = host or settings.api_host, port or settings.api_port
    options: ServeOptions = {
        "log_level": "info",
        "access_log": settings.api_access_log,
        "http": HTTP_PROTOCOL,  # closes connections whose headers do not arrive in 10 s
    }
    log_config = uvicorn_log_config(settings.log_format)
    if log_config is not None:
        options["log_config"] = log_config
    if workers > 1:  # each process builds its app from the environment (ade_api.cli.serve)
        try:
            serve(
                "ade_api.http.app:app_from_environment",
                workers=workers,
                host=host,
                port=port,
                **options,
            )
        except AdeError as exc:
            fail(exc.message)
    else:
        uvicorn.run(app_from_environment(), host=host, port=port, **options)
