"""One poll's reading of a repository: the listings since its cursor, and what they stand for.

The three listings (issues, comments, issue events; see `ingress.poller`) are read with no
database session open; the deliveries they imply (`ingress.poll_inference`) and the cursor
the next poll starts at come back for the poller to store in one transaction.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from ade_tasks.ingress.poll_cursors import format_time, next_cursor
from ade_tasks.ingress.poll_inference import (
    PolledDelivery,
    as_int,
    comment_delivery,
    comment_issue_number,
    event_delivery,
    is_pull,
    issue_deliveries,
    pull_from_issue,
    time_of,
)

log = logging.getLogger(__name__)


class PollClient(Protocol):
    """The GitHub reads a poll makes; `ade_workers.integrations.github.GithubClient` implements
    them.

    `list_issues` and `list_issue_comments` are ordered by updated_at, oldest first;
    `list_issue_events` newest first, back to `since`. Each holds at most `limit` items and
    raises `TransientError` (with `retry_after` seconds when GitHub said) when GitHub is
    unavailable.
    """

    def list_issues(
        self, repo: str, since: datetime, *, limit: int
    ) -> Sequence[Mapping[str, object]]: ...

    def list_issue_comments(
        self, repo: str, since: datetime, *, limit: int
    ) -> Sequence[Mapping[str, object]]: ...

    def list_issue_events(
        self, repo: str, since: datetime, *, limit: int
    ) -> Sequence[Mapping[str, object]]: ...

    def get_pull(self, repo: str, number: int) -> Mapping[str, object]: ...


@dataclass
class Window:
    """What one poll read: the deliveries inferred, the next cursor, and counts for reports."""

    cursor: datetime
    deliveries: list[PolledDelivery] = field(default_factory=list)
    listed: int = 0
    ignored: int = 0
    deferred: int = 0


def read_window(client: PollClient, repo: str, since: datetime, *, max_items: int) -> Window:
    """List `repo`'s changes since `since` and infer the deliveries they stand for."""
    issues = list(client.list_issues(repo, since, limit=max_items))
    comments = list(client.list_issue_comments(repo, since, limit=max_items))
    events = list(client.list_issue_events(repo, since, limit=max_items))
    if len(events) >= max_items:
        log.warning(
            "%s: more than %d issue events since %s; older label and title changes of this "
            "window are not seen",
            repo,
            max_items,
            format_time(since),
        )
    window = Window(next_cursor(since, issues, comments, limit=max_items))
    window.listed = len(issues) + len(comments) + len(events)
    by_number: dict[int, Mapping[str, object]] = {}
    pulls: dict[int, Mapping[str, object]] = {}
    for issue in issues:
        number = as_int(issue.get("number"))
        if number is None:
            continue
        by_number[number] = issue
        pull = _pull_for(client, repo, issue, since)
        if pull is not None:
            pulls[number] = pull
        window.deliveries.extend(issue_deliveries(repo, issue, since, pull))
    for comment in comments:
        delivery = _comment(client, repo, comment, since, by_number, window)
        if delivery is not None:
            window.deliveries.append(delivery)
    for event in events:
        listed = event.get("issue")
        number = as_int(listed.get("number")) if isinstance(listed, Mapping) else None
        current = by_number.get(number) if number is not None else None
        pull = pulls.get(number) if number is not None else None
        delivery = event_delivery(repo, event, since, current, pull)
        if delivery is not None:
            window.deliveries.append(delivery)
    return window


def _pull_for(
    client: PollClient, repo: str, issue: Mapping[str, object], since: datetime
) -> Mapping[str, object] | None:
    number = as_int(issue.get("number"))
    if not is_pull(issue) or number is None:
        return None
    closed = time_of(issue, "closed_at")
    if issue.get("state") != "open" and (closed is None or closed < since):
        return None  # closed before the window: nothing to report, no request to spend
    return client.get_pull(repo, number)


def _comment(
    client: PollClient,
    repo: str,
    comment: Mapping[str, object],
    since: datetime,
    by_number: Mapping[int, Mapping[str, object]],
    window: Window,
) -> PolledDelivery | None:
    created = time_of(comment, "created_at")
    number = comment_issue_number(comment)
    if created is None or created < since or number is None:
        window.ignored += 1
        return None
    issue = by_number.get(number)
    if issue is None:
        updated = time_of(comment, "updated_at") or created
        if updated > window.cursor:
            # Made after the issue listing: the next poll lists it again with its issue.
            window.deferred += 1
            return None
        issue = _issue_of(client, repo, comment, number)
    return comment_delivery(repo, comment, issue, since)


def _issue_of(
    client: PollClient, repo: str, comment: Mapping[str, object], number: int
) -> Mapping[str, object]:
    """The issue of a comment whose issue the listing did not hold (it was cut at the item
    limit): a PR's details, or what the comment itself says about a plain issue."""
    url = comment.get("html_url")
    if isinstance(url, str) and f"/pull/{number}" in url:
        pull = client.get_pull(repo, number)
        return {**pull_from_issue(pull), "pull_request": {"url": pull.get("url")}}
    return {"number": number}
