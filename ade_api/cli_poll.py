"""`ade-tasks poll github`: GitHub polling for clusters that cannot receive webhooks.

An edge like the other commands: it wires settings, the database, the Celery sender and the
GitHub client into `ade_tasks.ingress.poller.GithubPoller`, which holds the logic.
"""

from __future__ import annotations

import logging
import sys

import click

from ade_api.cli import fail, main
from ade_tasks.settings import Settings


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
    help="'owner/name=ISO|owner/name=ISO': start these repositories here instead of at their "
    "saved cursor (e.g. acme/api=2024-05-01T10:00:00Z)",
)
@click.option("--once", is_flag=True, help="poll once and exit (1 if a repository failed)")
@click.option(
    "--interval",
    type=click.FloatRange(min=10),
    default=60.0,
    show_default=True,
    help="seconds between polls",
)
@click.pass_obj
def poll_github(
    settings: Settings, repos: str | None, since: str | None, once: bool, interval: float
) -> None:
    """Store GitHub issue, PR and comment changes as ingress events, like webhooks would.

    Nothing is requested while no enabled rule has a github.* trigger. The cursor of each
    repository is kept in <ADE_DATA_DIR>/poll-github.cursor, so a restart resumes.
    """
    from sqlalchemy.exc import SQLAlchemyError

    from ade_tasks.db.engine import create_db_engine, create_session_factory
    from ade_tasks.errors import AdeError
    from ade_tasks.ingress.poller import (
        CURSOR_FILE,
        GithubPoller,
        format_time,
        parse_cursors,
        parse_repos,
    )
    from ade_tasks.retry import RetryPolicy
    from ade_workers.celery_app import CelerySender, create_celery_app
    from ade_workers.github import GithubClient

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
            settings.data_dir / CURSOR_FILE,
            repos=chosen,
            since=starts,
            interval=interval,
        )
        report = poller.run(once=once)
    except KeyboardInterrupt:
        click.echo("stopped; each repository's cursor is saved after its events are stored")
        return
    except AdeError as exc:
        fail(exc.message, 1)
    except SQLAlchemyError as exc:
        fail(f"the database failed ({exc}); is it migrated? run `ade-tasks db upgrade`", 1)
    finally:
        client.close()
    if report is None:
        return
    for repo in report.repos:
        if repo.error:
            click.echo(f"{repo.repo}: FAILED: {repo.error}", err=True)
            continue
        cursor = format_time(repo.cursor) if repo.cursor else "-"
        click.echo(
            f"{repo.repo}: {repo.stored} new event(s), {repo.duplicates} seen before, "
            f"{repo.listed} item(s) listed; cursor {cursor}"
        )
    sys.exit(1 if report.failed or any(r.error for r in report.repos) else 0)
