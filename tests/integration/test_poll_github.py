"""GitHub polling over real loopback HTTP: a ScriptedServer on 127.0.0.1, the real GithubClient,
SQLite, and `ade-tasks poll github --once` as an operator runs it (no broker needed)."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import select

from ade_tasks.db import cursors as cursors_db
from ade_tasks.db.engine import SessionFactory
from ade_tasks.db.schema import IngressEventRow
from ade_tasks.ingress.poll_cursors import CURSOR_FILE, IMPORTED_SUFFIX
from ade_tasks.ingress.poller import GithubPoller
from ade_tasks.retry import RetryPolicy
from ade_tasks.testing import InMemorySender
from ade_workers.integrations.github import GithubClient
from tests.fake_http import RecordedRequest, ScriptedServer
from tests.git_project import migrated_sqlite
from tests.support import BIN, child_env
from tests.unit.conftest import add_rule

REPO = "acme/widgets"
TOKEN = "ghp_poll_token"
SINCE = datetime(2024, 5, 1, tzinfo=UTC)
OPENED, COMMENTED = "2024-05-01T10:00:00Z", "2024-05-01T10:05:00Z"
RULES = {
    "review": "github.pr_opened",
    "answer": "github.pr_commented",
}


@pytest.fixture
def session_factory(tmp_path: Path) -> SessionFactory:
    factory = migrated_sqlite(tmp_path)
    for rule_id, trigger in RULES.items():
        add_rule(
            factory,
            tmp_path / "rules",
            rule_id,
            f"id: {rule_id}\ntriggers: [{{type: {trigger}, repo: {REPO}}}]\n"
            "execution: {kind: built-in, actions: [{type: run-command, command: 'true'}]}\n",
        )
    return factory


@pytest.fixture
def github() -> Iterator[ScriptedServer]:
    with ScriptedServer(repos=[REPO], token=TOKEN) as server:
        pr = server.seed_pull(REPO, "Add widgets", created_at=OPENED, user="alice")
        server.seed_comment(REPO, pr["number"], "LGTM @ade", created_at=COMMENTED, user="bob")
        yield server


@pytest.fixture
def client(github: ScriptedServer) -> Iterator[GithubClient]:
    # No client retries, as the CLI builds it: the poller's backoff does the waiting.
    policy = RetryPolicy(attempts=0)
    with GithubClient(base_url=github.url, token=TOKEN, timeout=5, policy=policy) as client:
        yield client


def events(session_factory: SessionFactory) -> list[tuple[str, str | None, str]]:
    with session_factory() as session:
        rows = session.execute(
            select(
                IngressEventRow.source, IngressEventRow.trigger_type, IngressEventRow.summary
            ).order_by(IngressEventRow.id)
        )
        return [(source, trigger, summary) for source, trigger, summary in rows]


def issue_listings(github: ScriptedServer) -> list[RecordedRequest]:
    return [r for r in github.requests_to("GET") if r.path == f"/repos/{REPO}/issues"]


def poller(
    session_factory: SessionFactory, client: GithubClient, sleeps: list[float]
) -> GithubPoller:
    return GithubPoller(
        session_factory, InMemorySender(), client, since={REPO: SINCE}, sleep=sleeps.append
    )


def cursor(session_factory: SessionFactory) -> str | None:
    with session_factory() as session:
        return cursors_db.read(session, f"github-poll:{REPO}")


def test_a_polled_pr_and_its_comment_become_ingress_events(
    session_factory: SessionFactory, client: GithubClient, github: ScriptedServer, tmp_path: Path
) -> None:
    # Given a PR opened and commented on since the cursor (the repo comes from the rules)
    sleeps: list[float] = []

    # When one cycle polls
    report = poller(session_factory, client, sleeps).poll_once()

    # Then both are stored as the webhook would have had them, with source `poll`
    assert report is not None and report.stored == 2
    assert events(session_factory) == [
        ("poll", "github.pr_opened", f"PR #1 opened by alice in {REPO}: Add widgets"),
        ("poll", "github.pr_commented", f"Comment created by bob on PR #1 in {REPO}: Add widgets"),
    ]
    assert sleeps == []
    listed = issue_listings(github)[0]
    assert listed.query == {
        "state": ["all"],
        "since": ["2024-05-01T00:00:00Z"],
        "sort": ["updated"],
        "direction": ["asc"],
        "per_page": ["100"],
    }
    assert listed.headers["authorization"] == f"Bearer {TOKEN}"
    assert len(github.requests_to("GET", f"/repos/{REPO}/pulls/1")) == 1


def test_a_listing_follows_link_pagination_up_to_its_limit(
    github: ScriptedServer, client: GithubClient
) -> None:
    for minute in range(249):
        stamp = f"2024-05-02T{10 + minute // 60:02d}:{minute % 60:02d}:00Z"
        github.seed_issue(REPO, f"Issue {minute}", created_at=stamp)

    everything = client.list_issues(REPO, SINCE)
    first = client.list_issues(REPO, SINCE, limit=150)

    assert len(everything) == 250  # the seeded PR too, updated first
    assert [item["title"] for item in everything[1:4]] == ["Issue 0", "Issue 1", "Issue 2"]
    assert first == everything[:150]
    pages = issue_listings(github)
    assert [r.query.get("page") for r in pages] == [None, ["2"], ["3"], None, ["2"]]
    assert {r.query["since"][0] for r in pages} == {"2024-05-01T00:00:00Z"}


def test_a_403_with_retry_after_is_waited_out_before_polling_again(
    session_factory: SessionFactory, client: GithubClient, github: ScriptedServer, tmp_path: Path
) -> None:
    # Given GitHub's secondary rate limit on the first listing
    github.fail_next(
        403,
        headers={"Retry-After": "42"},
        message="You have exceeded a secondary rate limit",
        path_prefix=f"/repos/{REPO}/issues",
    )
    sleeps: list[float] = []

    # When one cycle is asked for
    report = poller(session_factory, client, sleeps).poll_once()

    # Then the poller waited the 42 s GitHub asked for (not the 30 s backoff), then polled
    assert sleeps == [42.0]
    assert report is not None and report.stored == 2
    assert len(issue_listings(github)) == 2


def test_an_exhausted_rate_limit_is_waited_out_until_its_reset(
    session_factory: SessionFactory, client: GithubClient, github: ScriptedServer, tmp_path: Path
) -> None:
    reset = int(time.time()) + 600
    github.fail_next(
        403,
        headers={"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": str(reset)},
        message="API rate limit exceeded",
    )
    sleeps: list[float] = []

    poller(session_factory, client, sleeps).poll_once()

    assert len(sleeps) == 1 and 590 <= sleeps[0] <= 600


def test_poll_github_once_writes_the_cursor_and_a_second_run_stores_nothing_new(
    session_factory: SessionFactory, github: ScriptedServer, tmp_path: Path
) -> None:
    # Given the CLI's settings: this database, the scripted GitHub, a data dir for the cursor
    env = child_env(
        {
            "ADE_DATABASE_URL": f"sqlite:///{tmp_path / 'ade.db'}",
            "ADE_DATA_DIR": str(tmp_path / "data"),
            "ADE_GITHUB__API_URL": github.url,
            "ADE_GITHUB__TOKEN": TOKEN,
        }
    )
    command = [str(BIN / "ade-tasks"), "poll", "github", "--once"]

    # When an operator polls once from a starting point, then once more
    first = subprocess.run(
        [*command, "--since", f"{REPO}=2024-05-01T00:00:00Z"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    saved = cursor(session_factory)
    second = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)

    # Then the first stored both events and saved the cursor in the database; the second
    # either found this interval polled already or resumed at the cursor
    assert first.returncode == 0, first.stderr
    assert f"{REPO}: 2 new event(s)" in first.stdout
    assert saved == f"{REPO}={COMMENTED}"
    assert second.returncode == 0, second.stderr
    since = [r.query["since"] for r in issue_listings(github)]
    if "polled in this interval by poller:" in second.stdout:
        assert since == [["2024-05-01T00:00:00Z"]]
    else:  # the 30 s slot ended between the two runs
        assert f"{REPO}: 0 new event(s)" in second.stdout
        assert since == [["2024-05-01T00:00:00Z"], [COMMENTED]]
    assert [trigger for _, trigger, _ in events(session_factory)] == [
        "github.pr_opened",
        "github.pr_commented",
    ]
    assert not (tmp_path / "data" / CURSOR_FILE).exists()


def cli_env(tmp_path: Path, github: ScriptedServer) -> dict[str, str]:
    return child_env(
        {
            "ADE_DATABASE_URL": f"sqlite:///{tmp_path / 'ade.db'}",
            "ADE_DATA_DIR": str(tmp_path / "data"),
            "ADE_GITHUB__API_URL": github.url,
            "ADE_GITHUB__TOKEN": TOKEN,
        }
    )


def test_poll_github_imports_the_legacy_cursor_file_once_and_renames_it(
    session_factory: SessionFactory, github: ScriptedServer, tmp_path: Path
) -> None:
    # Given the file the standalone poller kept before cursors moved to the database
    legacy = tmp_path / "data" / CURSOR_FILE
    legacy.parent.mkdir(parents=True)
    legacy.write_text(f"{REPO}=2024-05-01T00:00:00Z\n")
    command = [str(BIN / "ade-tasks"), "poll", "github", "--once"]

    # When an operator polls once
    done = subprocess.run(
        command, env=cli_env(tmp_path, github), capture_output=True, text=True, timeout=60
    )

    # Then polling resumed at the file's cursor, which now lives in the database
    assert done.returncode == 0, done.stderr
    assert f"{REPO}: 2 new event(s)" in done.stdout
    assert [r.query["since"] for r in issue_listings(github)] == [["2024-05-01T00:00:00Z"]]
    assert cursor(session_factory) == f"{REPO}={COMMENTED}"
    assert not legacy.exists()
    assert legacy.with_name(CURSOR_FILE + IMPORTED_SUFFIX).read_text() == (
        f"{REPO}=2024-05-01T00:00:00Z\n"
    )


def test_poll_github_refuses_bad_cursor_text_naming_the_row_and_the_fix(
    session_factory: SessionFactory, github: ScriptedServer, tmp_path: Path
) -> None:
    with session_factory.begin() as session:
        cursors_db.write(
            session, f"github-poll:{REPO}", "last tuesday", by="hand", now=datetime.now(UTC)
        )
    command = [str(BIN / "ade-tasks"), "poll", "github", "--once"]

    done = subprocess.run(
        command, env=cli_env(tmp_path, github), capture_output=True, text=True, timeout=60
    )

    assert done.returncode == 1
    assert f"ingress_cursors row 'github-poll:{REPO}' holds 'last tuesday'" in done.stderr
    assert f"ade-tasks poll github --once --since {REPO}=" in done.stderr
    assert issue_listings(github) == []


def test_issue_events_are_walked_newest_first_only_back_to_since(
    github: ScriptedServer, client: GithubClient
) -> None:
    # Given 250 label events over 250 minutes, the newest 120 after `since`
    bug = github.seed_issue(REPO, "Busy", created_at="2024-05-01T00:00:00Z")
    base = datetime(2024, 5, 2, tzinfo=UTC)
    for minute in range(250):
        at = (base + timedelta(minutes=minute)).strftime("%Y-%m-%dT%H:%M:%SZ")
        github.label(REPO, bug["number"], f"l{minute}", at=at)
    since = base + timedelta(minutes=130)

    # When the events since then are listed
    found = client.list_issue_events(REPO, since)

    # Then exactly those came back, newest first, from the two pages that reach back to since
    assert [e["label"]["name"] for e in found] == [f"l{m}" for m in range(249, 129, -1)]
    pages = github.requests_to("GET", f"/repos/{REPO}/issues/events")
    assert [r.query.get("page") for r in pages] == [None, ["2"]]
