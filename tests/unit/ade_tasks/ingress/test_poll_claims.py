"""GitHub polling as claimed work, without sockets: slots, shared backoff, the database cursor
(its compare-and-set, legacy shapes, bad text) and labels and title edits from issue events."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from ade_tasks.db import cursors as cursors_db
from ade_tasks.db.engine import SessionFactory
from ade_tasks.db.schema import IngressEventRow, ScheduleOccurrenceRow
from ade_tasks.errors import InvalidInputError
from ade_tasks.ingress.poll_claims import POLL_CLAIMS
from ade_tasks.ingress.poll_cursors import CURSOR_FILE, IMPORTED_SUFFIX, source_of
from ade_tasks.ingress.poller import GithubPoller
from ade_tasks.states import OccurrenceOutcome
from ade_tasks.testing import InMemorySender
from tests.unit.ade_tasks.ingress.poller_support import (
    REPO,
    T1,
    T2,
    T3,
    FakeGithub,
    Unavailable,
    cursor_of,
    issue,
    pull_details,
    rule,
    stored,
)
from tests.unit.conftest import add_rule

START = datetime(2024, 5, 2, 0, 0, tzinfo=UTC)


class Clock:
    """A clock the test moves."""

    def __init__(self, now: datetime = START) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def watched(session_factory: SessionFactory, rules_dir: Path) -> SessionFactory:
    for rule_id, kind in [("pr", "github.pr_updated"), ("label", "github.issue_labeled")]:
        add_rule(
            session_factory, rules_dir, rule_id, rule(rule_id, f"{{type: {kind}, repo: {REPO}}}")
        )
    return session_factory


def poller(
    session_factory: SessionFactory, github: FakeGithub, owner: str, clock: Clock, **options: Any
) -> GithubPoller:
    return GithubPoller(
        session_factory, InMemorySender(), github, owner=owner, clock=clock, **options
    )


def set_cursor(session_factory: SessionFactory, text: str) -> None:
    with session_factory.begin() as session:
        cursors_db.write(session, source_of(REPO), text, by="test", now=START)


def claims(session_factory: SessionFactory) -> list[tuple[datetime, str, str]]:
    with session_factory() as session:
        rows = session.execute(
            select(
                ScheduleOccurrenceRow.slot,
                ScheduleOccurrenceRow.claimed_by,
                ScheduleOccurrenceRow.outcome,
            )
            .where(ScheduleOccurrenceRow.rule_id == POLL_CLAIMS)
            .order_by(ScheduleOccurrenceRow.slot)
        )
        return [(slot, by, str(outcome)) for slot, by, outcome in rows]


# --- slots --------------------------------------------------------------------------------------


def test_two_pollers_in_one_slot_poll_once_and_the_next_slot_goes_to_either(
    watched: SessionFactory, github: FakeGithub
) -> None:
    # Given two pollers (two beats) on one repository with a new issue
    set_cursor(watched, f"{REPO}=2024-05-01T10:00:00Z")
    github.issues.append(issue(1, created=T1))
    clock = Clock()
    first, second = poller(watched, github, "b1", clock), poller(watched, github, "b2", clock)

    # When both offer the same slot, then b1 is gone and b2 offers the next one
    one, two = first.cycle(), second.cycle()
    clock.now += timedelta(seconds=30)
    three = second.cycle()

    # Then the first slot was polled once, by b1; the next by b2
    assert [len(r.repos) for r in (one, two, three)] == [1, 0, 1]
    assert [name for name, *_ in github.calls].count("list_issues") == 2
    assert [by for _, by, _ in claims(watched)] == ["b1", "b2"]
    assert [trigger for _, trigger in stored(watched)] == ["github.issue_opened"]


def test_a_failed_poll_holds_its_backoff_for_every_poller(
    watched: SessionFactory, github: FakeGithub
) -> None:
    # Given GitHub's rate limit: come back in 100 s
    set_cursor(watched, f"{REPO}=2024-05-01T10:00:00Z")
    github.failures = [Unavailable(retry_after=100)]
    clock = Clock()
    first, second = poller(watched, github, "b1", clock), poller(watched, github, "b2", clock)

    # When b1 fails, and b2 offers every slot for the next two minutes
    report = first.cycle()
    polled_by_b2 = []
    for _ in range(4):
        clock.now += timedelta(seconds=30)
        polled_by_b2.append(len(second.cycle().repos))

    # Then b1 held the slots starting within the 100 s; b2 polled only after them
    assert report.repos[0].error is not None
    assert polled_by_b2 == [0, 0, 0, 1]
    assert [(by, outcome) for _, by, outcome in claims(watched)] == [
        ("b1", OccurrenceOutcome.FIRED),
        ("b1", OccurrenceOutcome.SKIPPED),
        ("b1", OccurrenceOutcome.SKIPPED),
        ("b1", OccurrenceOutcome.SKIPPED),
        ("b2", OccurrenceOutcome.FIRED),
    ]


def test_a_poll_overtaken_by_another_commits_nothing(
    watched: SessionFactory, github: FakeGithub
) -> None:
    # Given a PR labeled in the window, and a slow poll that another poll overtakes
    set_cursor(watched, f"{REPO}=2024-05-01T10:00:00Z")
    item = issue(10, created="2024-05-01T09:00:00Z", updated=T2, pull=True)
    github.issues.append(item)
    github.pulls[10] = pull_details(item, pushed="2024-05-01T09:00:00Z")
    github.events.append(labeled(900, item, "urgent", T2))
    clock = Clock()
    slow, fast = poller(watched, github, "slow", clock), poller(watched, github, "fast", clock)
    original = github.list_issues

    def overtaken(repo: str, since: datetime, *, limit: int) -> Any:
        github.list_issues = original  # type: ignore[method-assign]
        fast.poll_repo(REPO)  # the next slot's poll, elsewhere, commits first
        return original(repo, since, limit=limit)

    github.list_issues = overtaken  # type: ignore[method-assign]

    # When the slow poll finishes
    report = slow.poll_repo(REPO)

    # Then it stored nothing; the change is stored once, by the other poll
    assert report.overtaken and report.stored == 0
    assert stored(watched) == [(f"poll:{REPO}:pr-labeled:10:900", "github.pr_updated")]
    assert cursor_of(watched) == f"{REPO}={T2}"


# --- cursors ------------------------------------------------------------------------------------


def test_a_bare_iso_cursor_is_read_and_rewritten_in_ade_format(
    watched: SessionFactory, github: FakeGithub
) -> None:
    set_cursor(watched, "2024-05-01T10:00:00Z")
    github.issues.append(issue(1, created=T1, updated=T3))

    poller(watched, github, "b1", Clock()).cycle()

    assert github.calls[0][2] == datetime(2024, 5, 1, 10, tzinfo=UTC)
    assert cursor_of(watched) == f"{REPO}={T3}"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("yesterday", "is not an ISO 8601 time"),
        ("acme/other=2024-05-01T10:00:00Z", "it has no entry for acme/widgets"),
        (f"{REPO}=2024-05-01T10:00:00", "has no zone"),
    ],
)
def test_bad_cursor_text_is_refused_naming_the_row_and_the_fix(
    watched: SessionFactory, github: FakeGithub, text: str, says: str
) -> None:
    set_cursor(watched, text)

    report = poller(watched, github, "b1", Clock()).cycle()

    error = report.repos[0].error
    assert error is not None
    assert f"ingress_cursors row 'github-poll:{REPO}' holds {text!r}" in error
    assert says in error
    assert f"ade-tasks poll github --once --since {REPO}=" in error
    assert github.calls == []  # nothing was listed from a cursor nobody can read
    assert cursor_of(watched) == text


def test_the_legacy_cursor_file_is_imported_once_then_renamed(
    watched: SessionFactory, github: FakeGithub, tmp_path: Path
) -> None:
    # Given the old poller's file with this repository's cursor and another's
    legacy = tmp_path / "data" / CURSOR_FILE
    legacy.parent.mkdir(parents=True)
    legacy.write_text(f"{REPO}=2024-05-01T10:00:00Z|acme/old=2024-04-01T00:00:00Z\n")

    # When a poller starts with it
    poller(watched, github, "b1", Clock(), legacy_file=legacy).cycle()

    # Then both entries are in the database, polling resumed there, and the file is retired
    assert github.calls[0][2] == datetime(2024, 5, 1, 10, tzinfo=UTC)
    with watched() as session:
        assert cursors_db.read(session, "github-poll:acme/old") == "acme/old=2024-04-01T00:00:00Z"
    assert not legacy.exists()
    assert legacy.with_name(CURSOR_FILE + IMPORTED_SUFFIX).exists()


def test_a_legacy_file_never_overwrites_a_database_cursor_and_a_bare_iso_fills_all(
    watched: SessionFactory, github: FakeGithub, tmp_path: Path
) -> None:
    set_cursor(watched, f"{REPO}=2024-05-01T12:00:00Z")
    legacy = tmp_path / CURSOR_FILE
    legacy.write_text("2024-05-01T08:00:00Z\n")

    poller(watched, github, "b1", Clock(), legacy_file=legacy, repos=[REPO, "acme/new"]).cycle()

    with watched() as session:
        assert cursors_db.read(session, "github-poll:acme/new") is not None
    since = {repo: when for name, repo, when in github.calls if name == "list_issues"}
    assert since == {
        REPO: datetime(2024, 5, 1, 12, tzinfo=UTC),
        "acme/new": datetime(2024, 5, 1, 8, tzinfo=UTC),
    }


def test_a_bad_legacy_file_stops_this_poller_until_fixed(
    watched: SessionFactory, github: FakeGithub, tmp_path: Path
) -> None:
    legacy = tmp_path / CURSOR_FILE
    legacy.write_text("acme/widgets=soon\n")

    with pytest.raises(InvalidInputError, match=f"the legacy cursor file {legacy}"):
        poller(watched, github, "b1", Clock(), legacy_file=legacy).cycle()
    assert github.calls == [] and legacy.exists()


# --- labels and title edits ---------------------------------------------------------------------


def labeled(eid: int, item: dict[str, Any], label: str, at: str) -> dict[str, Any]:
    return {
        "id": eid,
        "event": "labeled",
        "label": {"name": label},
        "actor": {"login": "dora"},
        "created_at": at,
        "issue": dict(item),
    }


def renamed(eid: int, item: dict[str, Any], old: str, at: str) -> dict[str, Any]:
    return {
        "id": eid,
        "event": "renamed",
        "rename": {"from": old, "to": item["title"]},
        "actor": {"login": "erin"},
        "created_at": at,
        "issue": dict(item),
    }


def test_labels_and_title_edits_become_labeled_and_edited_deliveries_once(
    watched: SessionFactory, github: FakeGithub
) -> None:
    # Given an issue labeled, a PR labeled and renamed, an issue renamed, and an older label
    set_cursor(watched, f"{REPO}=2024-05-01T10:00:00Z")
    bug = issue(1, created="2024-05-01T09:00:00Z", updated=T1)
    pr = issue(10, created="2024-05-01T09:00:00Z", updated=T3, pull=True)
    plain = issue(2, created="2024-05-01T09:00:00Z", updated=T2)
    github.issues += [bug, plain, pr]
    github.pulls[10] = pull_details(pr, pushed="2024-05-01T09:00:00Z")
    github.events += [
        labeled(800, bug, "old", "2024-05-01T09:30:00Z"),
        labeled(901, bug, "triage", T1),
        renamed(902, plain, "Old title", T2),
        labeled(903, pr, "ready", T2),
        renamed(904, pr, "WIP", T3),
    ]
    clock = Clock()

    # When it is polled, and polled again over the same window (another beat, --since)
    first = poller(watched, github, "b1", clock).cycle()
    clock.now += timedelta(seconds=30)
    again = poller(watched, github, "b2", clock, since={REPO: datetime(2024, 5, 1, 10, tzinfo=UTC)})

    # Then each label and PR title change is stored once, with GitHub's event id; the issue's
    # title change has no trigger type and is not stored
    assert stored(watched) == [
        (f"poll:{REPO}:issue-labeled:1:901", "github.issue_labeled"),
        (f"poll:{REPO}:pr-labeled:10:903", "github.pr_updated"),
        (f"poll:{REPO}:pr-edited:10:904", "github.pr_updated"),
    ]
    assert first.repos[0].ignored == 1
    second = again.cycle()
    assert (second.repos[0].stored, second.repos[0].duplicates) == (0, 3)
    with watched() as session:
        summary = session.scalars(select(IngressEventRow.summary).order_by(IngressEventRow.id))
        assert summary.first() == f'Issue #1 labeled "triage" by dora in {REPO}: Item 1'


# --- the command --------------------------------------------------------------------------------


def test_poll_github_defaults_to_30_seconds_and_refuses_less_than_10() -> None:
    from click.testing import CliRunner

    from ade_api import cli

    shown = CliRunner().invoke(cli.main, ["poll", "github", "--help"])
    refused = CliRunner().invoke(cli.main, ["poll", "github", "--interval", "5"])

    assert shown.exit_code == 0 and "[default: 30.0; x>=10]" in shown.output
    assert refused.exit_code == 2
    assert "5.0 is not in the range x>=10" in refused.output
