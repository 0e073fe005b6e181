"""`ade-tasks poll github`: GitHub polling for clusters that cannot receive webhooks.

An edge like the other commands: it wires settings, the database, the Celery sender and the
GitHub client into `ade_tasks.ingress.poller.GithubPoller`, which holds the logic.
"""

from __future__ import annotations

import logging
import sys

import click

from ade_api.cli.root import fail, main
from ade_tasks.settings import Settings

#: `ade_tasks.ingress.poller.DEFAULT_INTERVAL`, kept here so `--help` loads no database code.
DEFAULT_INTERVAL = 30.0


@main.group()
def poll() -> None:
    """Poll external services for events, where webhooks cannot reach the cluster."""


@poll.command("github")
@click.option(
    "--repos",
    help="owner/name,... to poll (default: ADE_GITHUB__POLL_REPOS, else the repo filters of "
    "enabled github.* triggers)",
)
@click.option(
    "--since",
    help="'owner/name=ISO|owner/name=ISO': move these repositories' cursors here first (a "
    "rewind too), e.g. acme/api=2024-05-01T10:00:00Z",
)
@click.option("--once", is_flag=True, help="poll once and exit (1 if a repository failed)")
@click.option(
    "--interval",
    type=click.FloatRange(min=10),
    default=DEFAULT_INTERVAL,
    show_default=True,
    help="seconds between polls of a repository (the slot every poller claims)",
)
@click.pass_obj
def poll_github(
    settings: Settings, repos: str | None, since: str | None, once: bool, interval: float
) -> None:
    """Store GitHub issue, PR, comment, label and title changes as ingress events, like
    webhooks would.

    For clusters without beats (beats poll on their own, see ADE_GITHUB__POLL). It takes part
    in the same claims as the beats: each repository is polled by one process per interval,
    so running it beside beats, or twice, never stores a change twice. The cursors live in
    the database (an old <ADE_DATA_DIR>/poll-github.cursor is imported once and renamed).
    Nothing is requested while no enabled rule has a github.* trigger.
    """
    from sqlalchemy.exc import SQLAlchemyError

    from ade_tasks.db.engine import create_db_engine, create_session_factory
    from ade_tasks.errors import AdeError
    from ade_tasks.ingress.poll_cursors import (
        CURSOR_FILE,
        format_time,
        parse_cursors,
        parse_repos,
    )
    from ade_tasks.ingress.poller import GithubPoller
    from ade_tasks.retry import RetryPolicy
    from ade_workers.celery.app import CelerySender, create_celery_app
    from ade_workers.integrations.github import GithubClient

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    try:
        chosen = parse_repos(repos) if repos else parse_repos(",".join(settings.github.poll_repos))
        starts = parse_cursors(since) if since else {}
    except AdeError as exc:
        fail(exc.message)
    factory = create_session_factory(create_db_engine(settings.effective_database_url))
    # No client-side retries: the poller's own backoff honours Retry-After and rate-limit
    # resets in full, where a retry policy would cut them at its max_delay.
    client = GithubClient.from_settings(settings.github, policy=RetryPolicy(attempts=0))
    try:
        poller = GithubPoller(
            factory,
            CelerySender(create_celery_app(settings)),
            client,
            repos=chosen,
            since=starts,
            legacy_file=settings.data_dir / CURSOR_FILE,
            interval=interval,
        )
        if not once:
            poller.run()
            return
        report = poller.poll_once()
    except KeyboardInterrupt:
        click.echo("stopped; each repository's cursor is saved with its events")
        return
    except AdeError as exc:
        fail(exc.message, 1)
    except SQLAlchemyError as exc:
        fail(f"the database failed ({exc}); is it migrated? run `ade-tasks db upgrade`", 1)
    finally:
        client.close()
    if report.idle:
        click.echo(report.idle)
    for repo in report.repos:
        if repo.error:
            click.echo(f"{repo.repo}: FAILED: {repo.error}", err=True)
        elif repo.held_by:
            click.echo(f"{repo.repo}: polled in this interval by {repo.held_by}; skipped")
        elif repo.overtaken:
            click.echo(f"{repo.repo}: another poll stored this window first; nothing stored")
        else:
            cursor = format_time(repo.cursor) if repo.cursor else "-"
            click.echo(
                f"{repo.repo}: {repo.stored} new event(s), {repo.duplicates} seen before, "
                f"{repo.listed} item(s) listed; cursor {cursor}"
            )
    sys.exit(1 if report.failed or any(r.error for r in report.repos) else 0)
