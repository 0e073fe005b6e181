"""The poll cycle against an in-memory GitHub that records every call, storing into SQLite, and
the backoff between its tries.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from pathlib import Path

import pytest

from ade_tasks.db import rules as rules_db
from ade_tasks.db.engine import SessionFactory
from ade_tasks.ingress.poll_cursors import parse_time
from ade_tasks.ingress.poller import NO_REPOS, NO_RULES
from ade_tasks.retry import Backoff
from ade_tasks.testing import InMemorySender
from tests.unit.ade_tasks.ingress.poller_support import (
    BEFORE,
    REPO,
    SINCE,
    T1,
    T2,
    T3,
    FakeGithub,
    Sleeps,
    Unavailable,
    comment,
    cursor_of,
    issue,
    later,
    make_poller,
    pull_details,
    rule,
    stored,
)
from tests.unit.conftest import add_rule

# --- backoff ------------------------------------------------------------------------------------


def test_backoff_doubles_from_30_seconds_up_to_15_minutes() -> None:
    backoff = Backoff()

    delays = [backoff.delay_for(n) for n in range(1, 9)]

    assert delays == [30, 60, 120, 240, 480, 900, 900, 900]
    assert backoff.delay_for(10_000) == 900


def test_backoff_waits_at_least_what_the_server_asked_within_reason() -> None:
    backoff = Backoff()

    assert backoff.delay_for(1, retry_after=42) == 42
    assert backoff.delay_for(3, retry_after=42) == 120
    assert backoff.delay_for(1, retry_after=1800) == 1800  # a rate-limit reset, past the cap
    assert backoff.delay_for(1, retry_after=10**9) == backoff.server_maximum


# --- the cycle ----------------------------------------------------------------------------------


def test_no_request_at_all_while_no_enabled_rule_has_a_github_trigger(
    session_factory: SessionFactory,
    sender: InMemorySender,
    rules_dir: Path,
    github: FakeGithub,
    cursor_file: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Given only a manual rule and a disabled GitHub rule, and repositories given explicitly
    add_rule(session_factory, rules_dir, "by-hand", rule("by-hand", "{type: manual}"))
    add_rule(
        session_factory,
        rules_dir,
        "dormant",
        rule("dormant", f"{{type: github.pr_opened, repo: {REPO}}}", enabled=False),
    )
    github.issues.append(issue(1, created=T1))
    poller = make_poller(session_factory, sender, github, cursor_file, repos=[REPO])

    # When three cycles run
    with caplog.at_level(logging.INFO, logger="ade_tasks.ingress.poller"):
        reports = [poller.cycle() for _ in range(3)]

    # Then GitHub was never asked anything, nothing was stored, and the reason was logged once
    assert github.calls == []
    assert stored(session_factory) == []
    assert [r.idle for r in reports] == [NO_RULES] * 3
    assert [r.getMessage() for r in caplog.records].count(NO_RULES) == 1
    assert cursor_of(session_factory) is None


def test_a_cycle_stores_each_change_once_and_saves_the_cursor(
    session_factory: SessionFactory,
    sender: InMemorySender,
    rules_dir: Path,
    github: FakeGithub,
    cursor_file: Path,
) -> None:
    # Given GitHub rules on the repository (their repo filter names what to poll)
    add_rule(
        session_factory, rules_dir, "r", rule("r", f"{{type: github.pr_opened, repo: {REPO}}}")
    )
    opened = issue(10, created=T1, pull=True)
    github.issues.append(opened)
    github.pulls[10] = pull_details(opened)
    github.comments.append(comment(77, 10, created=T2))
    opened["updated_at"] = T2  # the comment moved the PR's updated_at, as on GitHub

    # When a cycle runs, then a restarted poller sees the same window again (--since)
    first = make_poller(session_factory, sender, github, cursor_file).cycle()
    saved = cursor_of(session_factory)
    second = make_poller(session_factory, sender, github, cursor_file, clock=later(1)).cycle()

    # Then each change was stored once, in the order it happened
    assert stored(session_factory) == [
        (f"poll:{REPO}:pr-opened:10:{T1}", "github.pr_opened"),
        (f"poll:{REPO}:comment-created:77:{T2}", "github.pr_commented"),
    ]
    assert (first.stored, second.stored, second.repos[0].duplicates) == (2, 0, 2)
    assert len(sender.ingress) == 2
    # And the cursor is the newest updated_at seen, in the database a restart reads
    assert saved == f"{REPO}={T2}"


def test_a_later_window_does_not_report_an_earlier_change_again(
    session_factory: SessionFactory,
    sender: InMemorySender,
    rules_dir: Path,
    github: FakeGithub,
    cursor_file: Path,
) -> None:
    # Given a PR opened, then commented on after the first cycle
    add_rule(
        session_factory, rules_dir, "r", rule("r", f"{{type: github.pr_opened, repo: {REPO}}}")
    )
    opened = issue(10, created=T1, pull=True)
    github.issues.append(opened)
    github.pulls[10] = pull_details(opened)
    poller = make_poller(session_factory, sender, github, cursor_file)
    poller.cycle()
    github.comments.append(comment(77, 10, created=T3))
    opened["updated_at"] = T3

    # When the next cycle (in the next slot) starts at the first one's cursor
    poller.clock = later(1)
    poller.cycle()

    # Then the PR is listed again but only the comment is new
    assert [call[2] for call in github.calls if call[0] == "list_issues"] == [
        SINCE,
        parse_time(T1),
    ]
    assert [trigger for _, trigger in stored(session_factory)] == [
        "github.pr_opened",
        "github.pr_commented",
    ]


def test_a_restarted_poller_resumes_at_the_saved_cursor_unless_since_overrides(
    session_factory: SessionFactory,
    sender: InMemorySender,
    rules_dir: Path,
    github: FakeGithub,
    cursor_file: Path,
) -> None:
    add_rule(
        session_factory, rules_dir, "r", rule("r", f"{{type: github.pr_opened, repo: {REPO}}}")
    )
    github.issues.append(issue(1, created=T3))
    make_poller(session_factory, sender, github, cursor_file).cycle()
    github.calls.clear()

    make_poller(session_factory, sender, github, cursor_file, since={}, clock=later(1)).cycle()
    earlier = datetime(2024, 4, 1, tzinfo=UTC)
    make_poller(
        session_factory, sender, github, cursor_file, since={REPO: earlier}, clock=later(2)
    ).cycle()

    since = [call[2] for call in github.calls if call[0] == "list_issues"]
    assert since == [parse_time(T3), earlier]


def test_a_new_repository_starts_at_the_current_time(
    session_factory: SessionFactory,
    sender: InMemorySender,
    rules_dir: Path,
    github: FakeGithub,
    cursor_file: Path,
) -> None:
    add_rule(
        session_factory, rules_dir, "r", rule("r", f"{{type: github.pr_opened, repo: {REPO}}}")
    )
    github.issues.append(issue(1, created=T1))  # history: not replayed
    now = datetime(2024, 6, 1, 12, 0, 0, 123456, tzinfo=UTC)

    make_poller(session_factory, sender, github, cursor_file, since={}, clock=lambda: now).cycle()

    assert github.calls[0] == ("list_issues", REPO, now.replace(microsecond=0))
    assert stored(session_factory) == []
    assert cursor_of(session_factory) == f"{REPO}=2024-06-01T12:00:00Z"


def test_a_comment_newer_than_the_issue_listing_waits_for_the_next_cycle(
    session_factory: SessionFactory,
    sender: InMemorySender,
    rules_dir: Path,
    github: FakeGithub,
    cursor_file: Path,
) -> None:
    # Given a comment made between the issue listing and the comment listing: its issue's new
    # updated_at was not listed yet
    trigger = f"{{type: github.issue_commented, repo: {REPO}}}"
    add_rule(session_factory, rules_dir, "r", rule("r", trigger))
    github.issues.append(issue(1, created=BEFORE, updated=T1))
    github.comments.append(comment(77, 2, created=T3))
    poller = make_poller(session_factory, sender, github, cursor_file)

    # When a cycle runs, and another once GitHub lists the issue as commented on
    first = poller.cycle()
    github.issues.append(issue(2, created=BEFORE, updated=T3))
    poller.clock = later(1)
    poller.cycle()

    # Then the comment is stored by the second cycle, with its issue
    assert first.repos[0].deferred == 1
    assert stored(session_factory) == [
        (f"poll:{REPO}:comment-created:77:{T3}", "github.issue_commented")
    ]


def test_one_failing_repository_does_not_stop_the_others(
    session_factory: SessionFactory,
    sender: InMemorySender,
    rules_dir: Path,
    github: FakeGithub,
    cursor_file: Path,
) -> None:
    from ade_tasks.errors import NotFoundError

    add_rule(
        session_factory, rules_dir, "r", rule("r", f"{{type: github.issue_opened, repo: {REPO}}}")
    )
    github.failures = [NotFoundError("GET /repos/acme/gone/issues answered 404")]
    github.issues.append(issue(1, created=T1))
    poller = make_poller(session_factory, sender, github, cursor_file, repos=["acme/gone", REPO])

    report = poller.cycle()

    assert [r.error is not None for r in report.repos] == [True, False]
    assert not report.failed
    assert stored(session_factory) == [(f"poll:{REPO}:issue-opened:1:{T1}", "github.issue_opened")]


def test_once_gives_up_after_its_retries_with_the_last_error(
    session_factory: SessionFactory,
    sender: InMemorySender,
    rules_dir: Path,
    github: FakeGithub,
    cursor_file: Path,
) -> None:
    add_rule(
        session_factory, rules_dir, "r", rule("r", f"{{type: github.pr_opened, repo: {REPO}}}")
    )
    github.failures = [Unavailable() for _ in range(4)]
    sleeps = Sleeps()
    poller = make_poller(session_factory, sender, github, cursor_file, sleep=sleeps)

    with pytest.raises(Unavailable):
        poller.poll_once()

    assert sleeps == [30, 60, 120]
    assert cursor_of(session_factory) == f"{REPO}=2024-05-01T10:00:00Z"  # --since's, unmoved


def test_github_triggers_without_a_repo_filter_poll_nothing_unless_repos_are_given(
    session_factory: SessionFactory,
    sender: InMemorySender,
    rules_dir: Path,
    github: FakeGithub,
    cursor_file: Path,
) -> None:
    add_rule(session_factory, rules_dir, "any", rule("any", "{type: github.issue_opened}"))

    idle = make_poller(session_factory, sender, github, cursor_file).cycle()
    assert idle.idle == NO_REPOS and github.calls == []

    make_poller(session_factory, sender, github, cursor_file, repos=[REPO]).cycle()
    assert [call[:2] for call in github.calls] == [
        ("list_issues", REPO),
        ("list_issue_comments", REPO),
        ("list_issue_events", REPO),
    ]


def test_a_cycle_validates_only_the_rules_with_github_triggers(
    session_factory: SessionFactory,
    sender: InMemorySender,
    rules_dir: Path,
    github: FakeGithub,
    cursor_file: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a rule watching the repository and a schedule rule beside it
    add_rule(
        session_factory,
        rules_dir,
        "watch",
        rule("watch", f"{{type: github.pr_opened, repo: {REPO}}}"),
    )
    add_rule(
        session_factory,
        rules_dir,
        "nightly",
        rule("nightly", "{type: schedule, cron: '0 3 * * *'}"),
    )
    with session_factory() as session:
        hashes = {row.id: row.content_hash for row in rules_db.list_rules(session)}
    monkeypatch.setattr(rules_db, "_PARSED", {})  # this process has validated no rule yet
    # When a cycle reads what to poll
    make_poller(session_factory, sender, github, cursor_file).cycle()
    # Then it polled the watched repository, and the schedule rule was never validated (every
    # beat's poller reads the rules every slot: at 100,000 rules it parsed all of them)
    assert {call[1] for call in github.calls} == {REPO}
    assert rules_db.cached_rule(hashes["watch"]) is not None
    assert rules_db.cached_rule(hashes["nightly"]) is None


def test_the_heartbeat_carries_each_repositorys_last_successful_and_failed_poll(
    session_factory: SessionFactory,
    sender: InMemorySender,
    rules_dir: Path,
    github: FakeGithub,
    cursor_file: Path,
) -> None:
    # given a poller of two repositories, one of which GitHub refuses (issue 37, finding 3)
    from ade_tasks.db import heartbeats as heartbeats_db
    from ade_tasks.errors import NotFoundError

    add_rule(
        session_factory, rules_dir, "r", rule("r", f"{{type: github.issue_opened, repo: {REPO}}}")
    )
    github.failures = [NotFoundError("GET /repos/acme/gone/issues answered 401")]
    poller = make_poller(session_factory, sender, github, cursor_file, repos=["acme/gone", REPO])

    # when it polls once and says it is alive
    poller.cycle()
    poller.heartbeat()

    # then its heartbeat says which polls failed, why, and when one last succeeded
    with session_factory() as session:
        (found,) = heartbeats_db.recent(session)
    now = datetime(2024, 5, 2, tzinfo=UTC)
    gone, widgets = found.polls["acme/gone"], found.polls[REPO]
    assert (gone.ok_at, gone.failed_at, gone.failing) == (None, now, True)
    assert gone.error == "GET /repos/acme/gone/issues answered 401"
    assert (widgets.ok_at, widgets.failing) == (now, False)
