"""GitHub polling without sockets: cursors, action inference, the backoff policy and the poll
cycle against an in-memory GitHub that records every call, storing into SQLite."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from ade_tasks.db import cursors as cursors_db
from ade_tasks.db import rules as rules_db
from ade_tasks.db.engine import SessionFactory
from ade_tasks.db.schema import IngressEventRow
from ade_tasks.errors import InvalidInputError, TransientError
from ade_tasks.ingress.poll_cursors import (
    CURSOR_FILE,
    format_cursors,
    parse_cursors,
    parse_time,
    source_of,
)
from ade_tasks.ingress.poll_inference import comment_delivery, issue_deliveries
from ade_tasks.ingress.poller import NO_REPOS, NO_RULES, GithubPoller
from ade_tasks.retry import Backoff
from ade_tasks.testing import InMemorySender
from tests.unit.conftest import add_rule

REPO = "acme/widgets"
SINCE = datetime(2024, 5, 1, 10, 0, tzinfo=UTC)
BEFORE = "2024-05-01T09:00:00Z"
T1, T2, T3 = "2024-05-01T10:01:00Z", "2024-05-01T10:02:00Z", "2024-05-01T10:03:00Z"
EXECUTION = 'execution: {kind: built-in, actions: [{type: run-command, command: "true"}]}'


def rule(rule_id: str, trigger: str, *, enabled: bool = True) -> str:
    return f"id: {rule_id}\nenabled: {str(enabled).lower()}\ntriggers: [{trigger}]\n{EXECUTION}\n"


def issue(
    number: int,
    *,
    created: str,
    updated: str | None = None,
    closed: str | None = None,
    pull: bool = False,
    merged: str | None = None,
) -> dict[str, Any]:
    item: dict[str, Any] = {
        "id": 5000 + number,
        "number": number,
        "title": f"Item {number}",
        "body": "text",
        "user": {"login": "alice"},
        "labels": [{"name": "bug"}],
        "state": "closed" if closed else "open",
        "author_association": "MEMBER",
        "created_at": created,
        "updated_at": updated or closed or created,
        "closed_at": closed,
        "html_url": f"https://github.example/{REPO}/{'pull' if pull else 'issues'}/{number}",
    }
    if pull:
        item["pull_request"] = {"url": f"https://api.example/{number}", "merged_at": merged}
    return item


def pull_details(
    item: Mapping[str, Any],
    *,
    sha: str = "a" * 40,
    pushed: str | None = None,
    merged: str | None = None,
) -> dict[str, Any]:
    return {
        **{k: item[k] for k in ("number", "title", "body", "user", "labels", "state")},
        **{k: item[k] for k in ("author_association", "created_at", "updated_at", "closed_at")},
        "draft": False,
        "merged": merged is not None,
        "merged_at": merged,
        "merged_by": {"login": "bob"} if merged else None,
        "head": {"ref": "feature", "sha": sha, "repo": {"pushed_at": pushed or item["created_at"]}},
        "base": {"ref": "main", "sha": "b" * 40},
        "html_url": item["html_url"],
    }


def comment(cid: int, number: int, *, created: str, updated: str | None = None) -> dict[str, Any]:
    kind = "pull" if number >= 10 else "issues"  # test convention: PRs are numbered 10 and up
    return {
        "id": cid,
        "body": "please look @ade",
        "user": {"login": "carol"},
        "author_association": "CONTRIBUTOR",
        "created_at": created,
        "updated_at": updated or created,
        "issue_url": f"https://api.example/repos/{REPO}/issues/{number}",
        "html_url": f"https://github.example/{REPO}/{kind}/{number}#issuecomment-{cid}",
    }


class FakeGithub:
    """An in-memory GitHub that answers like GithubClient and records every call."""

    def __init__(self) -> None:
        self.issues: list[dict[str, Any]] = []
        self.comments: list[dict[str, Any]] = []
        self.pulls: dict[int, dict[str, Any]] = {}
        self.events: list[dict[str, Any]] = []  # issue events, oldest first
        self.calls: list[tuple[str, str, Any]] = []
        self.failures: list[Exception] = []

    def _answer(self, kind: str, repo: str, arg: Any) -> None:
        self.calls.append((kind, repo, arg))
        if self.failures:
            raise self.failures.pop(0)

    def _since(self, items: list[dict[str, Any]], since: datetime) -> list[dict[str, Any]]:
        found = [i for i in items if parse_time(i["updated_at"]) >= since]
        return sorted(found, key=lambda i: parse_time(i["updated_at"]))

    def list_issues(self, repo: str, since: datetime, *, limit: int) -> Sequence[Mapping[str, Any]]:
        self._answer("list_issues", repo, since)
        return self._since(self.issues, since)[:limit]

    def list_issue_comments(
        self, repo: str, since: datetime, *, limit: int
    ) -> Sequence[Mapping[str, Any]]:
        self._answer("list_issue_comments", repo, since)
        return self._since(self.comments, since)[:limit]

    def list_issue_events(
        self, repo: str, since: datetime, *, limit: int
    ) -> Sequence[Mapping[str, Any]]:
        self._answer("list_issue_events", repo, since)
        found = [e for e in reversed(self.events) if parse_time(e["created_at"]) >= since]
        return found[:limit]

    def get_pull(self, repo: str, number: int) -> Mapping[str, Any]:
        self._answer("get_pull", repo, number)
        return self.pulls[number]


class Unavailable(TransientError):
    """GitHub is unavailable (a stand-in for IntegrationUnavailableError)."""

    def __init__(self, retry_after: float | None = None) -> None:
        super().__init__("GET /repos/acme/widgets/issues answered 503")
        self.retry_after = retry_after


class Sleeps(list[float]):
    """A sleep that records how long it was asked to wait, and never waits."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)


@pytest.fixture
def github() -> FakeGithub:
    return FakeGithub()


@pytest.fixture
def cursor_file(tmp_path: Path) -> Path:
    return tmp_path / "data" / CURSOR_FILE


def make_poller(
    session_factory: SessionFactory,
    sender: InMemorySender,
    github: FakeGithub,
    cursor_file: Path,
    **options: Any,
) -> GithubPoller:
    options.setdefault("since", {REPO: SINCE})
    options.setdefault("clock", lambda: datetime(2024, 5, 2, tzinfo=UTC))
    return GithubPoller(session_factory, sender, github, legacy_file=cursor_file, **options)


def cursor_of(session_factory: SessionFactory, repo: str = REPO) -> str | None:
    with session_factory() as session:
        return cursors_db.read(session, source_of(repo))


def later(minutes: int) -> Any:
    """A clock `minutes` after the default one: a later slot, as the next cycle would see."""
    return lambda: datetime(2024, 5, 2, 0, minutes, tzinfo=UTC)


def stored(session_factory: SessionFactory) -> list[tuple[str, str | None]]:
    with session_factory() as session:
        rows = session.execute(
            select(IngressEventRow.delivery_id, IngressEventRow.trigger_type)
            .where(IngressEventRow.source == "poll")
            .order_by(IngressEventRow.id)
        )
        return [(str(delivery), trigger) for delivery, trigger in rows]


# --- cursors ------------------------------------------------------------------------------------


def test_cursor_text_round_trips_in_utc_with_lower_case_repositories() -> None:
    text = "Acme/API=2024-05-01T12:00:00+02:00|acme/web=2024-05-02T08:30:15Z|"

    cursors = parse_cursors(text)

    assert cursors == {
        "acme/api": datetime(2024, 5, 1, 10, 0, tzinfo=UTC),
        "acme/web": datetime(2024, 5, 2, 8, 30, 15, tzinfo=UTC),
    }
    formatted = format_cursors(cursors)
    assert formatted == "acme/api=2024-05-01T10:00:00Z|acme/web=2024-05-02T08:30:15Z"
    assert parse_cursors(formatted) == cursors


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("acme/api", "must look like owner/name=2024-05-01T10:00:00Z"),
        ("acme=2024-05-01T10:00:00Z", "must look like owner/name="),
        ("acme/api=yesterday", "is not an ISO 8601 time"),
        ("acme/api=2024-05-01T10:00:00", "has no zone; add Z"),
        ("acme/api=2024-05-01T10:00:00Z|ACME/api=2024-05-02T10:00:00Z", "given twice"),
    ],
)
def test_a_bad_cursor_is_refused_naming_the_part(text: str, says: str) -> None:
    with pytest.raises(InvalidInputError, match=says):
        parse_cursors(text)


def test_a_corrupt_legacy_cursor_file_names_the_file_and_the_way_out(
    session_factory: SessionFactory,
    sender: InMemorySender,
    rules_dir: Path,
    github: FakeGithub,
    cursor_file: Path,
) -> None:
    # Given the old poller's file, damaged
    add_rule(
        session_factory, rules_dir, "r", rule("r", f"{{type: github.pr_opened, repo: {REPO}}}")
    )
    cursor_file.parent.mkdir(parents=True)
    cursor_file.write_text("acme/widgets=last tuesday\n")

    # When a poller starts
    with pytest.raises(InvalidInputError) as caught:
        make_poller(session_factory, sender, github, cursor_file, since={}).cycle()

    # Then it names the file and what to do, asks GitHub nothing and leaves the file alone
    assert str(cursor_file) in caught.value.message
    assert "fix or delete the file" in caught.value.message
    assert "is not an ISO 8601 time" in caught.value.message
    assert github.calls == [] and cursor_file.exists()


# --- action inference ---------------------------------------------------------------------------


def test_an_issue_created_in_the_window_is_opened_even_if_updated_since() -> None:
    item = issue(1, created=T1, updated=T2)  # a bot labelled it a minute after it was opened

    [delivery] = issue_deliveries(REPO, item, SINCE)

    assert (delivery.event_name, delivery.action) == ("issues", "opened")
    assert delivery.delivery_id == f"poll:{REPO}:issue-opened:1:{T1}"
    event = delivery.normalized()
    assert (event.source, event.trigger_type) == ("poll", "github.issue_opened")
    assert (event.repo, event.number, event.author, event.labels) == (REPO, 1, "alice", ("bug",))


def test_an_issue_edited_or_commented_in_the_window_yields_nothing() -> None:
    assert issue_deliveries(REPO, issue(1, created=BEFORE, updated=T1), SINCE) == []


def test_an_issue_closed_in_the_window_is_closed_and_one_opened_too_yields_both() -> None:
    old = issue_deliveries(REPO, issue(1, created=BEFORE, closed=T2), SINCE)
    new = issue_deliveries(REPO, issue(2, created=T1, closed=T2), SINCE)

    assert [d.normalized().trigger_type for d in old] == ["github.issue_closed"]
    assert [d.action for d in new] == ["opened", "closed"]


def test_an_issue_closed_before_the_window_is_not_closed_again() -> None:
    item = issue(1, created=BEFORE, closed=BEFORE, updated=T1)  # commented on after closing

    assert issue_deliveries(REPO, item, SINCE) == []


def test_a_pull_request_created_in_the_window_is_opened_with_its_branches() -> None:
    item = issue(10, created=T1, pull=True)

    [delivery] = issue_deliveries(REPO, item, SINCE, pull_details(item))

    assert (delivery.event_name, delivery.action) == ("pull_request", "opened")
    event = delivery.normalized()
    assert event.trigger_type == "github.pr_opened"
    assert (event.branch, event.base, event.head_sha) == ("feature", "main", "a" * 40)
    assert event.author_association == "MEMBER"


def test_a_merged_pull_request_is_closed_and_merged_an_unmerged_one_only_closed() -> None:
    merged = issue(10, created=BEFORE, closed=T2, pull=True, merged=T2)
    dropped = issue(11, created=BEFORE, closed=T2, pull=True)

    [merge] = issue_deliveries(REPO, merged, SINCE, pull_details(merged, merged=T2))
    [close] = issue_deliveries(REPO, dropped, SINCE, pull_details(dropped))

    assert merge.action == close.action == "closed"
    assert merge.normalized().trigger_type == "github.pr_merged"
    assert merge.payload["sender"] == {"login": "bob"}  # merged_by
    assert close.normalized().trigger_type == "github.pr_closed"


def test_a_pull_request_pushed_in_the_window_is_synchronized_once_per_head_commit() -> None:
    item = issue(10, created=BEFORE, updated=T2, pull=True)

    [push] = issue_deliveries(REPO, item, SINCE, pull_details(item, sha="c" * 40, pushed=T2))

    assert push.action == "synchronize"
    assert push.delivery_id == f"poll:{REPO}:pr-synchronize:10:{'c' * 40}"
    assert push.normalized().trigger_type == "github.pr_updated"


def test_a_pull_request_only_commented_on_in_the_window_yields_nothing() -> None:
    item = issue(10, created=BEFORE, updated=T2, pull=True)

    assert issue_deliveries(REPO, item, SINCE, pull_details(item, pushed=BEFORE)) == []


def test_a_comment_created_in_the_window_is_created_on_its_pr_or_issue() -> None:
    on_pr = comment(77, 10, created=T1, updated=T3)  # edited later: still a new comment
    on_issue = comment(78, 1, created=T1)

    pr_delivery = comment_delivery(REPO, on_pr, issue(10, created=BEFORE, pull=True), SINCE)
    issue_delivery = comment_delivery(REPO, on_issue, issue(1, created=BEFORE), SINCE)

    assert pr_delivery is not None and issue_delivery is not None
    assert pr_delivery.action == "created"
    assert pr_delivery.delivery_id == f"poll:{REPO}:comment-created:77:{T1}"
    event = pr_delivery.normalized()
    assert (event.trigger_type, event.author, event.body) == (
        "github.pr_commented",
        "carol",
        "please look @ade",
    )
    assert issue_delivery.normalized().trigger_type == "github.issue_commented"


def test_a_comment_created_before_the_window_is_an_edit_and_yields_nothing() -> None:
    edited = comment(77, 1, created=BEFORE, updated=T1)

    assert comment_delivery(REPO, edited, issue(1, created=BEFORE), SINCE) is None


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
