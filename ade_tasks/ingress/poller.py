"""GitHub polling, for clusters that cannot receive webhooks (`ade-tasks poll github`).

Each cycle lists, per repository, the issues and pull requests updated since the repository's
cursor (GET /repos/{repo}/issues?state=all&since=...&sort=updated&direction=asc) and then the
issue comments updated since then (GET /repos/{repo}/issues/comments?since=...), turns every
change it can infer into the body a webhook would have carried, normalizes it with
`ingress.github.normalize` and stores it through the webhook intake with source `poll`. From
there matching, dispatch and the ingress log work as for a webhook delivery.

**Action inference.** A listing shows what an item is now, not what happened to it, so the
action is inferred from its timestamps against the window start S (the cursor the listing used):

- an issue or PR created at or after S: `issues.opened` / `pull_request.opened`
  (github.issue_opened / github.pr_opened);
- one closed at or after S: `issues.closed` / `pull_request.closed` (github.issue_closed;
  github.pr_merged when the PR's merged_at is set, else github.pr_closed);
- an open PR created before S whose head repository was pushed at or after S, and after the PR
  was opened: `pull_request.synchronize` (github.pr_updated);
- a comment created at or after S: `issue_comment.created` (github.pr_commented /
  github.issue_commented);
- anything else is an edit, on which no trigger type starts: nothing is stored.

"Opened" asks only that the item was created inside the window, not that created_at equals
updated_at: a bot's comment or label seconds after a PR is opened moves updated_at, and the
opening must not be lost for it. An item opened and closed within one window yields both.

Limits (what a webhook would say that polling cannot):
- Intermediate states are invisible: labels, title or body edits, reopening, ready-for-review and
  reviews are never inferred, so `github.issue_labeled` and `github.pr_review_submitted` (and
  check runs, workflow runs, releases and pushes, which are not listed) never come from polling.
  A PR's updated_at also moves on every comment, so "the PR changed" alone is not reported.
- `pr_updated` means "a new head commit": GitHub reports the last push per repository, not per
  branch, so a push to another branch of the head repository may report a PR's current head
  commit; each head commit is reported at most once, several pushes in one window only once,
  and a PR whose head repository is gone reports its head once when it is next updated.
- Who acted is unknown for pushes (summaries say "someone"); a merge names `merged_by`.
- Polling a repository that also delivers webhooks runs its rules twice (the two sources carry
  different delivery ids): use one or the other per repository.

**Delivery ids** are `poll:{repo}:{kind}-{action}:{number or comment id}:{version}`, the version
being the instant of the inferred change (created_at, closed_at) or, for `synchronize`, the head
commit. An item seen by two overlapping windows therefore gets the same id and is stored once
(the intake ignores a repeated delivery id), and a change is never reported again just because
the item was updated later. That holds while the ingress log keeps the event (7 days).

**Cursor.** One instant per repository, persisted as `owner/name=ISO|owner/name=ISO` (the form
`--since` takes) after each repository's events are stored. It advances to the newest
updated_at the cycle fully covered: the issue listing's newest item, held back to the comment
listing's newest when that listing stopped at its item limit (the rest comes next cycle). Issues
are listed before comments, so a comment made between the two listings is listed now and again
next cycle (its issue's updated_at moved with it), never lost. A repository seen for the first
time starts at the current time: polling never replays history unless `--since` asks for it.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import re
import socket
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from ade_tasks.db import heartbeats as heartbeats_db
from ade_tasks.db import rules as rules_db
from ade_tasks.db.engine import SessionFactory
from ade_tasks.dispatch import TaskSender
from ade_tasks.errors import AdeError, InvalidInputError, TransientError
from ade_tasks.ingress.event import EventSource, NormalizedEvent
from ade_tasks.ingress.github import normalize
from ade_tasks.ingress.intake import event_row, store_event

log = logging.getLogger(__name__)

SOURCE: EventSource = "poll"
CURSOR_FILE = "poll-github.cursor"
NO_RULES = "no enabled rule has a github.* trigger; not polling"
NO_REPOS = (
    "enabled github.* triggers name no repo, and neither --repos nor ADE_GITHUB__POLL_REPOS "
    "is set; not polling"
)
#: The trigger types polling can infer (see "Limits" above); the others need webhooks.
POLLED_TYPES = frozenset(
    {
        "github.pr_opened",
        "github.pr_updated",
        "github.pr_merged",
        "github.pr_closed",
        "github.pr_commented",
        "github.issue_opened",
        "github.issue_closed",
        "github.issue_commented",
    }
)
#: Items one listing returns per cycle; a busier window continues in the next cycle.
MAX_ITEMS = 1000
_REPO = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")
_ISO_EXAMPLE = "2024-05-01T10:00:00Z"


class PollClient(Protocol):
    """The GitHub reads a poll cycle makes; `ade_workers.github.GithubClient` implements them.

    Listings are ordered by updated_at, oldest first, hold at most `limit` items, and raise
    `TransientError` (with `retry_after` seconds when GitHub said) when GitHub is unavailable.
    """

    def list_issues(
        self, repo: str, since: datetime, *, limit: int
    ) -> Sequence[Mapping[str, Any]]: ...

    def list_issue_comments(
        self, repo: str, since: datetime, *, limit: int
    ) -> Sequence[Mapping[str, Any]]: ...

    def get_pull(self, repo: str, number: int) -> Mapping[str, Any]: ...


# --- time and cursors ---------------------------------------------------------------------------


def parse_time(text: str) -> datetime:
    """An ISO 8601 instant with a zone as aware UTC; ValueError saying what is wrong."""
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(f"{text!r} is not an ISO 8601 time such as {_ISO_EXAMPLE}") from None
    if when.tzinfo is None or when.utcoffset() is None:
        raise ValueError(f"{text!r} has no zone; add Z for UTC, e.g. {_ISO_EXAMPLE}")
    return when.astimezone(UTC)


def format_time(when: datetime) -> str:
    """`when` as GitHub writes times (UTC, whole seconds: 2024-05-01T10:00:00Z)."""
    if when.tzinfo is None or when.utcoffset() is None:
        raise ValueError(f"a naive datetime has no place in a cursor: {when.isoformat()}")
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def check_repo(repo: str) -> str:
    """`repo` stripped, if it looks like owner/name; InvalidInputError otherwise."""
    name = repo.strip()
    if not _REPO.match(name):
        raise InvalidInputError(f"repository {repo!r} must look like owner/name (e.g. acme/api)")
    return name


def parse_repos(text: str) -> list[str]:
    """`owner/name,owner/name` as a list (duplicates, in any letter case, dropped)."""
    return _unique(check_repo(part) for part in text.split(",") if part.strip())


def parse_cursors(text: str) -> dict[str, datetime]:
    """`owner/name=ISO|owner/name=ISO` as {repo (lower case): instant}; InvalidInputError names
    the part that is wrong."""
    cursors: dict[str, datetime] = {}
    for raw in text.split("|"):
        part = raw.strip()
        if not part:
            continue
        repo, equals, when = part.partition("=")
        if not equals or not _REPO.match(repo.strip()):
            raise InvalidInputError(
                f"cursor {part!r} must look like owner/name={_ISO_EXAMPLE} (several joined with |)"
            )
        key = repo.strip().lower()
        if key in cursors:
            raise InvalidInputError(f"cursor {part!r}: {repo.strip()} is given twice")
        try:
            cursors[key] = parse_time(when)
        except ValueError as exc:
            raise InvalidInputError(f"cursor {part!r}: {exc}") from None
    return cursors


def format_cursors(cursors: Mapping[str, datetime]) -> str:
    """The cursor text `parse_cursors` reads back (repositories in alphabetical order)."""
    return "|".join(f"{repo.lower()}={format_time(when)}" for repo, when in sorted(cursors.items()))


def load_cursors(path: Path) -> dict[str, datetime]:
    """The cursors saved in `path` ({} when there is no file yet)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    try:
        return parse_cursors(text)
    except InvalidInputError as exc:
        raise InvalidInputError(
            f"{path}: {exc.message}; fix or delete the file, or start over with --since"
        ) from None


def save_cursors(path: Path, cursors: Mapping[str, datetime]) -> None:
    """Write the cursors atomically: a crash mid-write leaves the previous file intact."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(format_cursors(cursors) + "\n")
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def next_cursor(
    since: datetime,
    issues: Sequence[Mapping[str, Any]],
    comments: Sequence[Mapping[str, Any]],
    *,
    limit: int,
) -> datetime:
    """Where the next cycle of a repository starts (see "Cursor" in the module docstring)."""
    newest = _newest(issues) or since
    if len(comments) >= limit:
        # The comment listing stopped early: comments past its last one are not seen yet.
        newest = min(newest, _newest(comments) or since)
    return max(since, newest)


def _newest(items: Iterable[Mapping[str, Any]]) -> datetime | None:
    stamps = [when for item in items if (when := _time(item, "updated_at")) is not None]
    return max(stamps, default=None)


# --- backoff ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PollBackoff:
    """How long the poller waits after consecutive failed cycles: `initial` seconds, times
    `factor` per further failure, at most `maximum`; never less than a server's Retry-After or
    rate-limit reset (believed up to `server_maximum`, past which the header is taken as bogus)."""

    initial: float = 30.0
    factor: float = 2.0
    maximum: float = 15 * 60.0
    # GitHub's primary rate limit resets hourly; a little slack covers clock skew.
    server_maximum: float = 65 * 60.0

    def __post_init__(self) -> None:
        for name in ("initial", "maximum", "server_maximum"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"poll backoff {name} must be >= 0 seconds, got {value}")
        if not (math.isfinite(self.factor) and self.factor >= 1):
            raise ValueError(f"poll backoff factor must be >= 1, got {self.factor}")

    def delay_for(self, failures: int, retry_after: float | None = None) -> float:
        """Seconds to wait after `failures` failed cycles in a row (1 = the first failure)."""
        if failures < 1:
            raise ValueError(f"failure counts start at 1, got {failures}")
        # The exponent is bounded so a poller that failed for days never overflows a float.
        delay = min(self.initial * self.factor ** min(failures - 1, 64), self.maximum)
        if retry_after is not None and math.isfinite(retry_after) and retry_after > delay:
            delay = min(retry_after, self.server_maximum)
        return delay


# --- payloads -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class PolledDelivery:
    """A webhook delivery inferred from a polled item: what `normalize` takes, and when the
    change happened (deliveries are stored in that order)."""

    event_name: str
    delivery_id: str
    payload: dict[str, Any]
    at: datetime

    @property
    def action(self) -> str:
        """The inferred webhook action (`opened`, `closed`, `synchronize`, `created`)."""
        return str(self.payload["action"])

    def normalized(self) -> NormalizedEvent:
        """The delivery as the normalized event a webhook would give, with source `poll`."""
        event = normalize(self.event_name, self.delivery_id, self.payload)
        return dataclasses.replace(event, source=SOURCE)


def is_pull(issue: Mapping[str, Any]) -> bool:
    """Whether an issue listing item is a pull request."""
    return isinstance(issue.get("pull_request"), Mapping)


def issue_deliveries(
    repo: str,
    issue: Mapping[str, Any],
    since: datetime,
    pull: Mapping[str, Any] | None = None,
) -> list[PolledDelivery]:
    """The deliveries an issue listing item stands for, given the window start `since`.

    `pull` is the PR's details (GET /pulls/{n}); without it a PR item is described from the
    listing alone (no branches, head commit or merge state, so no `synchronize`).
    """
    number = _int(issue.get("number"))
    if number is None:
        return []
    created, closed = _time(issue, "created_at"), _time(issue, "closed_at")
    if is_pull(issue):
        details = pull if pull is not None else _pull_from_issue(issue)
        kind, event_name = "pr", "pull_request"
    else:
        details, kind, event_name = issue, "issue", "issues"
    found: list[tuple[str, datetime, str, Any]] = []
    if created is not None and created >= since:
        found.append(("opened", created, format_time(created), issue.get("user")))
    if closed is not None and closed >= since:
        closer = details.get("merged_by") or issue.get("closed_by")
        found.append(("closed", closed, format_time(closed), closer))
    elif kind == "pr" and not found and pull is not None:
        head = _obj(pull.get("head"))
        sha = head.get("sha")
        if pull.get("state") == "open" and isinstance(sha, str) and sha:
            pushed = _time(_obj(head.get("repo")), "pushed_at")
            if pushed is None or (pushed >= since and (created is None or pushed > created)):
                at = pushed or _time(issue, "updated_at") or since
                found.append(("synchronize", at, sha, None))
    deliveries = []
    for action, at, version, sender in found:
        body = _pr_body(details, number) if kind == "pr" else {"issue": dict(issue)}
        payload = {"action": action, **body, "repository": _repository(repo)}
        if isinstance(sender, Mapping):
            payload["sender"] = dict(sender)
        delivery_id = f"poll:{repo.lower()}:{kind}-{action}:{number}:{version}"
        deliveries.append(PolledDelivery(event_name, delivery_id, payload, at))
    return deliveries


def comment_delivery(
    repo: str, comment: Mapping[str, Any], issue: Mapping[str, Any], since: datetime
) -> PolledDelivery | None:
    """The `issue_comment.created` delivery of a comment created in the window; None for an
    edit (no trigger type starts on one) or a comment GitHub described without id or times."""
    created, cid = _time(comment, "created_at"), _int(comment.get("id"))
    if created is None or created < since or cid is None:
        return None
    payload: dict[str, Any] = {
        "action": "created",
        "issue": dict(issue),
        "comment": dict(comment),
        "repository": _repository(repo),
    }
    if isinstance(comment.get("user"), Mapping):
        payload["sender"] = dict(comment["user"])
    delivery_id = f"poll:{repo.lower()}:comment-created:{cid}:{format_time(created)}"
    return PolledDelivery("issue_comment", delivery_id, payload, created)


def comment_issue_number(comment: Mapping[str, Any]) -> int | None:
    """The number of the issue or PR a comment belongs to (from its `issue_url`)."""
    url = comment.get("issue_url")
    tail = url.rstrip("/").rsplit("/", 1)[-1] if isinstance(url, str) else ""
    return int(tail) if tail.isdigit() else None


def _pr_body(pull: Mapping[str, Any], number: int) -> dict[str, Any]:
    return {"number": number, "pull_request": dict(pull)}


def _pull_from_issue(issue: Mapping[str, Any]) -> dict[str, Any]:
    merged_at = _obj(issue.get("pull_request")).get("merged_at")
    fields = ("number", "title", "body", "user", "labels", "state", "draft", "html_url")
    return {
        **{name: issue[name] for name in fields if name in issue},
        "author_association": issue.get("author_association"),
        "merged_at": merged_at,
    }


def _repository(repo: str) -> dict[str, Any]:
    owner, name = repo.split("/", 1)
    return {"full_name": repo, "name": name, "owner": {"login": owner}}


def _obj(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _time(item: Mapping[str, Any], key: str) -> datetime | None:
    value = item.get(key)
    if not isinstance(value, str):
        return None
    try:
        return parse_time(value)
    except ValueError:
        return None  # GitHub's data is read defensively, as webhook bodies are


def _unique(repos: Iterable[str]) -> list[str]:
    # GitHub names are case-insensitive: Acme/API and acme/api are one repository.
    seen: dict[str, str] = {}
    for repo in repos:
        seen.setdefault(repo.lower(), repo)
    return list(seen.values())


# --- the poller ---------------------------------------------------------------------------------


@dataclass
class RepoReport:
    """What one repository's poll found and stored."""

    repo: str
    since: datetime | None = None
    cursor: datetime | None = None
    listed: int = 0
    stored: int = 0
    duplicates: int = 0
    ignored: int = 0
    deferred: int = 0
    error: str | None = None


@dataclass
class CycleReport:
    """One poll cycle: the repositories polled, or why none was (`idle`)."""

    repos: list[RepoReport] = field(default_factory=list)
    idle: str | None = None

    @property
    def stored(self) -> int:
        """New events stored over all repositories."""
        return sum(report.stored for report in self.repos)

    @property
    def failed(self) -> bool:
        """True when every repository polled failed (the cycle achieved nothing)."""
        return bool(self.repos) and all(report.error for report in self.repos)


def _utcnow() -> datetime:
    return datetime.now(UTC)


class GithubPoller:
    """Polls GitHub for the repositories rules watch and stores what changed as ingress events.

    `repos` (from --repos or ADE_GITHUB__POLL_REPOS) wins over the `repo` filters of enabled
    github.* triggers; `since` ({repo: instant}) wins over the saved cursors. `clock` and `sleep`
    are injectable so tests never wait.
    """

    def __init__(
        self,
        session_factory: SessionFactory,
        sender: TaskSender,
        client: PollClient,
        cursor_file: Path,
        *,
        repos: Sequence[str] = (),
        since: Mapping[str, datetime] | None = None,
        interval: float = 60.0,
        backoff: PollBackoff | None = None,
        max_items: int = MAX_ITEMS,
        once_retries: int = 3,
        clock: Callable[[], datetime] = _utcnow,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not (math.isfinite(interval) and interval > 0):
            raise InvalidInputError(f"the poll interval must be > 0 seconds, got {interval}")
        if max_items < 1:
            raise InvalidInputError(f"max_items must be at least 1, got {max_items}")
        self.session_factory = session_factory
        self.sender = sender
        self.client = client
        self.cursor_file = cursor_file
        self.repos = _unique(check_repo(repo) for repo in repos)
        self.interval = interval
        self.backoff = backoff or PollBackoff()
        self.max_items = max_items
        self.once_retries = once_retries
        self.clock = clock
        self.sleep = sleep
        self.cursors = load_cursors(cursor_file)
        self.cursors.update({repo.lower(): when for repo, when in (since or {}).items()})
        self._idle: str | None = None
        self.process_id = f"poller:{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"

    # -- the loop ---------------------------------------------------------------------------------

    def run(
        self, *, once: bool = False, should_stop: Callable[[], bool] = lambda: False
    ) -> CycleReport | None:
        """Poll every `interval` seconds until `should_stop()` (asked before each wait).

        A failed cycle (GitHub unavailable or rate limited, every repository refused, the
        database down) waits per `backoff`, honouring Retry-After and rate-limit resets; a
        success resets it. With `once`, returns after the first completed cycle, having retried
        a transient failure up to `once_retries` times (then its error is raised).
        """
        failures = 0
        while True:
            try:
                report = self.cycle()
            except TransientError as exc:
                failures += 1
                if once and failures > self.once_retries:
                    raise
                wait = self.backoff.delay_for(failures, _retry_after(exc))
                log.warning("GitHub polling failed: %s; next try in %.0fs", exc.message, wait)
            except Exception:
                if once:
                    raise
                failures += 1
                wait = self.backoff.delay_for(failures)
                # A long-running poller outlives a database restart or a bug in one cycle.
                log.exception("GitHub polling failed; next try in %.0fs", wait)
            else:
                if once:
                    return report
                if report.failed:
                    failures += 1
                    wait = self.backoff.delay_for(failures)
                    log.warning("every repository failed to poll; next try in %.0fs", wait)
                else:
                    failures = 0
                    wait = self.interval
            if should_stop():
                return None
            self._heartbeat(wait)
            self.sleep(wait)

    def _heartbeat(self, wait: float) -> None:
        """Tell rule health this poller is alive and cycles again in `wait` seconds."""
        try:
            with self.session_factory.begin() as session:
                heartbeats_db.record(
                    session,
                    self.process_id,
                    heartbeats_db.POLLER,
                    every=wait,
                    now=self.clock(),
                    detail={"repos": self.repos or None},
                )
        except Exception as exc:  # the database may be away; the next cycle says so too
            log.warning("poller heartbeat not recorded: %s", type(exc).__name__)

    def cycle(self) -> CycleReport:
        """Poll every repository once. A TransientError (GitHub unavailable or rate limited)
        ends the cycle at once; any other error is recorded on its repository's report."""
        repos, idle = self._targets()
        if idle is not None:
            if idle != self._idle:
                log.info(idle)  # once per idle spell, not every interval
            self._idle = idle
            return CycleReport(idle=idle)
        self._idle = None
        report = CycleReport()
        for repo in repos:
            try:
                report.repos.append(self.poll_repo(repo))
            except TransientError:
                raise
            except AdeError as exc:
                log.warning("polling %s failed: %s", repo, exc.message)
                report.repos.append(RepoReport(repo, error=exc.message))
        if report.stored:
            log.info("GitHub polling stored %d new event(s)", report.stored)
        return report

    def poll_repo(self, repo: str) -> RepoReport:
        """List one repository's changes since its cursor, store them, advance the cursor."""
        key = repo.lower()
        since = self.cursors.get(key) or self.clock().replace(microsecond=0)
        report = RepoReport(repo, since=since)
        issues = list(self.client.list_issues(repo, since, limit=self.max_items))
        comments = list(self.client.list_issue_comments(repo, since, limit=self.max_items))
        report.listed = len(issues) + len(comments)
        cursor = next_cursor(since, issues, comments, limit=self.max_items)
        deliveries: list[PolledDelivery] = []
        by_number: dict[int, Mapping[str, Any]] = {}
        for issue in issues:
            number = _int(issue.get("number"))
            if number is None:
                continue
            by_number[number] = issue
            found = issue_deliveries(repo, issue, since, self._pull_for(repo, issue, since))
            report.ignored += not found
            deliveries.extend(found)
        for comment in comments:
            delivery = self._comment(repo, comment, since, cursor, by_number, report)
            if delivery is not None:
                deliveries.append(delivery)
        for delivery in sorted(deliveries, key=lambda d: d.at):
            stored = self._store(delivery)
            if stored is None:
                report.ignored += 1
            elif stored:
                report.stored += 1
            else:
                report.duplicates += 1
        report.cursor = self.cursors[key] = cursor
        save_cursors(self.cursor_file, self.cursors)
        return report

    # -- plumbing ---------------------------------------------------------------------------------

    def _targets(self) -> tuple[list[str], str | None]:
        """The repositories to poll, or why there are none (read from the rules every cycle)."""
        with self.session_factory() as session:
            rows = [row for row in rules_db.list_rules(session) if row.enabled]
            triggers = [
                trigger
                for row in rows
                for trigger in rules_db.load_rule(row).triggers
                if trigger.type.startswith("github.")
            ]
        if not triggers:
            return [], NO_RULES
        repos = self.repos or _unique(
            repo for trigger in triggers if isinstance(repo := getattr(trigger, "repo", None), str)
        )
        return (repos, None) if repos else ([], NO_REPOS)

    def _pull_for(
        self, repo: str, issue: Mapping[str, Any], since: datetime
    ) -> Mapping[str, Any] | None:
        number = _int(issue.get("number"))
        if not is_pull(issue) or number is None:
            return None
        closed = _time(issue, "closed_at")
        if issue.get("state") != "open" and (closed is None or closed < since):
            return None  # closed before the window: nothing to report, no request to spend
        return self.client.get_pull(repo, number)

    def _comment(
        self,
        repo: str,
        comment: Mapping[str, Any],
        since: datetime,
        cursor: datetime,
        by_number: Mapping[int, Mapping[str, Any]],
        report: RepoReport,
    ) -> PolledDelivery | None:
        created = _time(comment, "created_at")
        number = comment_issue_number(comment)
        if created is None or created < since or number is None:
            report.ignored += 1
            return None
        issue = by_number.get(number)
        if issue is None:
            updated = _time(comment, "updated_at") or created
            if updated > cursor:
                # Made after the issue listing: the next cycle lists it again with its issue.
                report.deferred += 1
                return None
            issue = self._issue_of(repo, comment, number)
        return comment_delivery(repo, comment, issue, since)

    def _issue_of(self, repo: str, comment: Mapping[str, Any], number: int) -> Mapping[str, Any]:
        """The issue of a comment whose issue the listing did not hold (it was cut at the item
        limit): a PR's details, or what the comment itself says about a plain issue."""
        url = comment.get("html_url")
        if isinstance(url, str) and f"/pull/{number}" in url:
            pull = self.client.get_pull(repo, number)
            return {**_pull_from_issue(pull), "pull_request": {"url": pull.get("url")}}
        return {"number": number}

    def _store(self, delivery: PolledDelivery) -> bool | None:
        """True when stored, False for a duplicate, None when no trigger type starts on it."""
        event = delivery.normalized()
        if event.trigger_type is None:
            return None
        row = event_row(
            source=SOURCE,
            delivery_id=event.delivery_id,
            event=event,
            event_key=event.event_key,
            payload=event.to_payload(),
            digest=None,
        )
        intake = store_event(self.session_factory, self.sender, row)
        return not intake.duplicate


def _retry_after(exc: Exception) -> float | None:
    value = getattr(exc, "retry_after", None)
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return max(float(value), 0.0)
    return None
