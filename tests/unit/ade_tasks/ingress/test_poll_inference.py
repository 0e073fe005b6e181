"""Which webhook-shaped deliveries a poller infers from what GitHub lists in a window: opened,
closed, merged and synchronized issues and pull requests, and new comments.
"""

from __future__ import annotations

from ade_tasks.ingress.poll_inference import comment_delivery, issue_deliveries
from tests.unit.ade_tasks.ingress.poller_support import (
    BEFORE,
    REPO,
    SINCE,
    T1,
    T2,
    T3,
    comment,
    issue,
    pull_details,
)


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
