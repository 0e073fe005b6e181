"""GitHub polling without sockets: an in-memory GitHub that records every call, builders of
the issues, pull requests and comments it lists, and a poller storing into SQLite.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import select

from ade_tasks.db import cursors as cursors_db
from ade_tasks.db.engine import SessionFactory
from ade_tasks.db.schema import IngressEventRow
from ade_tasks.errors import TransientError
from ade_tasks.ingress.poll_cursors import parse_time, source_of
from ade_tasks.ingress.poller import GithubPoller
from ade_tasks.testing import InMemorySender

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
