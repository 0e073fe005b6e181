"""GitHub polling, for clusters GitHub's webhooks cannot reach: claimed work of the beats (and of
`ade-tasks poll github` where no beat runs).

Each poll of a repository lists the issues and pull requests updated since the repository's
cursor (GET /repos/{repo}/issues?state=all&since=...&sort=updated&direction=asc), the issue
comments updated since then (GET /repos/{repo}/issues/comments?since=...) and the repository's
issue events newest first back to the cursor (GET /repos/{repo}/issues/events), turns every
change it can infer (`ingress.poll_inference`) into the body a webhook would have carried,
normalizes it with `ingress.github.normalize` and stores it as an ingress event with source
`poll`. From there matching, dispatch and the ingress log work as for a webhook delivery.

**Claims and backoff.** Each repository's poll is claimed per interval slot across the cluster
(`ingress.poll_claims`), so one process polls it at a time and another takes over within one
interval when that one dies; a failed poll holds the slots its backoff covers for everyone.
A poll that outlasts its slot may be overlapped by the next slot's poll elsewhere; the cursor's
compare-and-set (`ingress.poll_cursors`) lets only the first commit, so nothing is stored twice.

**Cursor.** One per repository in `ingress_cursors`, written in the transaction that stores the
events it covers (see `ingress.poll_cursors`). It advances to the newest updated_at the poll
fully covered: the issue listing's newest item, held back to the comment listing's newest when
that listing stopped at its item limit. Issues are listed before comments, so a comment made
between the two listings is listed now and again next time (its issue's updated_at moved with
it), never lost. A repository polled for the first time starts at the current time: polling
never replays history unless `--since` asks for it.

**Which repositories.** `repos` (--repos, ADE_GITHUB__POLL_REPOS) wins over the `repo` filters of
enabled github.* triggers, read again every cycle. Nothing is requested while no enabled rule
has a github.* trigger.

Limits (what a webhook would say that polling cannot):
- Reopening, unlabeling, ready-for-review, body edits and reviews are never inferred, so
  `github.pr_review_submitted` (and check runs, workflow runs, releases and pushes, which are
  not listed) never come from polling; `github.issue_labeled` does, from the issue events.
- `pr_updated` from a push means "a new head commit": GitHub reports the last push per
  repository, not per branch, so a push to another branch of the head repository may report a
  PR's current head commit; each head commit is reported at most once.
- Who acted is unknown for pushes (summaries say "someone"); a merge names `merged_by`, a label
  or title edit its actor.
- More than `max_items` issue events in one window: the oldest of them are not seen (GitHub
  lists them newest first and has no `since` for them); a warning says so.
- Polling a repository that also delivers webhooks runs its rules twice (the two sources carry
  different delivery ids): use one or the other per repository (`ADE_GITHUB__POLL`).
"""

from __future__ import annotations

import logging
import math
import os
import socket
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy.exc import IntegrityError

from ade_tasks.db import heartbeats as heartbeats_db
from ade_tasks.db import ingress as ingress_db
from ade_tasks.db import rule_triggers
from ade_tasks.db.engine import SessionFactory
from ade_tasks.errors import AdeError, InvalidInputError, TransientError
from ade_tasks.ingress import poll_cursors
from ade_tasks.ingress.intake import event_row, hand_over
from ade_tasks.ingress.poll_claims import PollClaims
from ade_tasks.ingress.poll_cursors import check_repo, unique_repos
from ade_tasks.ingress.poll_inference import (
    SOURCE,
    PolledDelivery,
)
from ade_tasks.ingress.poll_window import PollClient, read_window
from ade_tasks.retry import Backoff, retry_after_of
from ade_tasks.runs.senders import IngressSender

log = logging.getLogger(__name__)

DEFAULT_INTERVAL = 30.0
GITHUB = "github."  # the prefix of every GitHub trigger type
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
        "github.pr_labeled",
        "github.pr_merged",
        "github.pr_closed",
        "github.pr_commented",
        "github.issue_opened",
        "github.issue_labeled",
        "github.issue_closed",
        "github.issue_commented",
    }
)
#: Items one listing returns per poll; a busier window continues in the next poll.
MAX_ITEMS = 1000
#: How often a poller says it is alive (rule health counts it gone after this and a grace).
HEARTBEAT_SECONDS = 10.0


@dataclass
class RepoReport:
    """What one repository's poll found and stored, or why it did not poll."""

    repo: str
    since: datetime | None = None
    cursor: datetime | None = None
    listed: int = 0
    stored: int = 0
    duplicates: int = 0
    ignored: int = 0
    deferred: int = 0
    error: str | None = None
    #: Another process holds this slot (it polls the repository now), by this id.
    held_by: str | None = None
    #: Another poll committed this window first; this one stored nothing.
    overtaken: bool = False


@dataclass
class CycleReport:
    """One cycle: the repositories this process polled, or why none was polled (`idle`)."""

    repos: list[RepoReport] = field(default_factory=list)
    idle: str | None = None

    @property
    def stored(self) -> int:
        """New events stored over all repositories."""
        return sum(report.stored for report in self.repos)

    @property
    def failed(self) -> bool:
        """True when every repository polled failed (the cycle achieved nothing)."""
        polled = [report for report in self.repos if report.held_by is None]
        return bool(polled) and all(report.error for report in polled)


def _utcnow() -> datetime:
    return datetime.now(UTC)


class GithubPoller:
    """Polls the repositories rules watch, claiming each repository's slot, and stores what
    changed as ingress events.

    `owner` names this process in claims, cursors and its heartbeat. `since` ({repo: instant},
    from --since) is written as those repositories' cursors on the first cycle (a rewind is
    allowed); `legacy_file` is the old local cursor file, imported on the first cycle. `clock`
    and `sleep` are injectable so tests never wait.
    """

    def __init__(
        self,
        session_factory: SessionFactory,
        sender: IngressSender,
        client: PollClient,
        *,
        owner: str | None = None,
        repos: Sequence[str] = (),
        since: Mapping[str, datetime] | None = None,
        legacy_file: Path | None = None,
        interval: float = DEFAULT_INTERVAL,
        backoff: Backoff | None = None,
        max_items: int = MAX_ITEMS,
        once_retries: int = 3,
        tick: float = 1.0,
        clock: Callable[[], datetime] = _utcnow,
        sleep: Callable[[float], object] = time.sleep,
    ) -> None:
        if not (math.isfinite(interval) and interval > 0):
            raise InvalidInputError(f"the poll interval must be > 0 seconds, got {interval}")
        if max_items < 1:
            raise InvalidInputError(f"max_items must be at least 1, got {max_items}")
        self.session_factory = session_factory
        self.sender = sender
        self.client = client
        self.owner = owner or f"poller:{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.repos = unique_repos(check_repo(repo) for repo in repos)
        self.since = {repo.lower(): when for repo, when in (since or {}).items()}
        self.legacy_file = legacy_file
        self.interval = interval
        self.backoff = backoff or Backoff()
        self.max_items = max_items
        self.once_retries = once_retries
        self.tick = tick
        self.clock = clock
        self.sleep = sleep
        self._prepared = False
        self._idle: str | None = None
        self.claims = PollClaims(session_factory, self.owner, interval)
        self._failures: dict[str, int] = {}
        self._not_before: dict[str, datetime] = {}
        self._last_heartbeat: datetime | None = None
        #: Per repository (lower-cased), its latest polls: rule health reads them from the
        #: heartbeat, so a poller whose every poll fails is not a path that fires anything.
        self.polls: dict[str, heartbeats_db.PollOutcome] = {}
        self._targets_slot: datetime | None = None
        self._targets_cache: tuple[list[str], str | None] = ([], None)

    # -- the loop ---------------------------------------------------------------------------------

    def run(self, *, should_stop: Callable[[], bool] = lambda: False) -> None:
        """Offer every repository's slots until `should_stop()` (asked after each tick).

        A failing cycle (the database down, a bad legacy cursor file) is logged and retried on
        the next tick; a failing repository backs off (see "Claims and backoff" above).
        """
        reported: str | None = None
        while True:
            try:
                self.cycle()
                reported = None
            except AdeError as exc:
                if exc.message != reported:  # once per spell, not every tick
                    log.error("GitHub polling: %s", exc.message)
                reported = exc.message
            except Exception:
                # A long-running poller outlives a database restart or a bug in one cycle.
                log.exception("GitHub polling failed; trying again in %.0fs", self.tick)
            self.heartbeat()
            if should_stop():
                return
            self.sleep(self.tick)

    def heartbeat(self) -> None:
        """Tell rule health this poller is alive (every `HEARTBEAT_SECONDS`)."""
        now = self.clock()
        if self._last_heartbeat is not None and (now - self._last_heartbeat) < timedelta(
            seconds=HEARTBEAT_SECONDS
        ):
            return
        try:
            with self.session_factory.begin() as session:
                heartbeats_db.record(
                    session,
                    self.owner,
                    heartbeats_db.POLLER,
                    every=max(HEARTBEAT_SECONDS, self.tick),
                    now=now,
                    detail={
                        "repos": self.repos or None,
                        "polls": {repo: found.as_detail() for repo, found in self.polls.items()},
                    },
                )
            self._last_heartbeat = now
        except Exception as exc:  # the database may be away; the next cycle says so too
            log.warning("poller heartbeat not recorded: %s", type(exc).__name__)

    def cycle(self) -> CycleReport:
        """Claim the current slot of every repository not yet offered in it (and not backing
        off), and poll the ones won. A repository's failure is recorded on its report."""
        now = self.clock()
        slot = self.claims.slot(now)
        if self._targets_slot != slot:
            # Once per slot, not per tick: a cluster of 10,000 rules is not re-read every second.
            self._targets_cache, self._targets_slot = self._targets(), slot
        repos, idle = self._targets_cache
        if idle is not None:
            return self._idle_report(idle)
        self._prepare(repos)
        due = [
            repo
            for repo in self.claims.untried(repos, slot)
            if self._not_before.get(repo.lower(), now) <= now
        ]
        report = CycleReport()
        for repo in self.claims.claim(due, slot):
            report.repos.append(self._poll_guarded(repo, now))
        if report.stored:
            log.info("GitHub polling stored %d new event(s)", report.stored)
        return report

    def poll_once(self) -> CycleReport:
        """Poll every repository now, once (`--once`): its current slot is claimed as in the
        loop, so a repository another process polls in this slot is reported `held_by` it.
        A transient failure is retried up to `once_retries` times, waiting per `backoff`;
        then its error is raised."""
        repos, idle = self._targets()
        if idle is not None:
            return self._idle_report(idle)
        self._prepare(repos)
        slot = self.claims.slot(self.clock())
        won = set(self.claims.claim(repos, slot))
        report = CycleReport()
        for repo in repos:
            if repo not in won:
                report.repos.append(RepoReport(repo, held_by=self.claims.holder(repo, slot)))
                continue
            failures = 0
            while True:
                try:
                    report.repos.append(self.poll_repo(repo))
                    break
                except TransientError as exc:
                    failures += 1
                    if failures > self.once_retries:
                        raise
                    self.sleep(self.backoff.delay_for(failures, retry_after_of(exc)))
                except AdeError as exc:
                    report.repos.append(RepoReport(repo, error=exc.message))
                    break
        return report

    # -- one repository -----------------------------------------------------------------------

    def poll_repo(self, repo: str) -> RepoReport:
        """List one repository's changes since its cursor, then store them and the new cursor
        in one transaction (unless another poll committed this window first)."""
        with self.session_factory() as session:
            stored = poll_cursors.read(session, repo)
        since = stored.since or self.clock().replace(microsecond=0)
        report = RepoReport(repo, since=since)
        window = read_window(self.client, repo, since, max_items=self.max_items)
        report.listed, report.deferred, report.ignored = (
            window.listed,
            window.deferred,
            window.ignored,
        )
        self._commit(repo, stored.text, window.cursor, window.deliveries, report)
        return report

    def _commit(
        self,
        repo: str,
        expected: str | None,
        cursor: datetime,
        deliveries: list[PolledDelivery],
        report: RepoReport,
    ) -> None:
        new: list[int] = []
        try:
            with self.session_factory.begin() as session:
                _, current = poll_cursors.locked_text(session, repo)
                if current != expected:
                    report.overtaken = True
                    log.info("%s: another poll committed this window first; dropped", repo)
                    return  # nothing was written: the commit only ends the row lock
                for delivery in sorted(deliveries, key=lambda d: d.at):
                    event = delivery.normalized()
                    if event.trigger_type is None:
                        report.ignored += 1  # no trigger type starts on it (issues.edited)
                        continue
                    row = event_row(
                        source=SOURCE,
                        delivery_id=event.delivery_id,
                        event=event,
                        event_key=event.event_key,
                        payload=event.to_payload(),
                        digest=None,
                    )
                    event_id = ingress_db.record_event(session, row)
                    if event_id is None:
                        report.duplicates += 1
                    else:
                        new.append(event_id)
                poll_cursors.write(session, repo, cursor, by=self.owner, now=self.clock())
        except IntegrityError:
            # Two first polls of a repository raced to create its cursor row; the other won.
            report.overtaken = True
            return
        report.stored, report.cursor = len(new), cursor
        hand_over(self.session_factory, self.sender, new)

    def _poll_guarded(self, repo: str, now: datetime) -> RepoReport:
        key = repo.lower()
        try:
            report = self.poll_repo(repo)
        except AdeError as exc:
            self._failures[key] = failures = self._failures.get(key, 0) + 1
            retry_after = retry_after_of(exc) if isinstance(exc, TransientError) else None
            wait = self.backoff.delay_for(failures, retry_after)
            until = now + timedelta(seconds=wait)
            self._not_before[key] = until
            try:
                self.claims.hold(repo, now, until)
            except Exception as hold_error:  # the next slot is then offered as usual
                log.warning("could not hold %s's backoff: %s", repo, type(hold_error).__name__)
            log.warning("polling %s failed: %s; next try in %.0fs", repo, exc.message, wait)
            self.polls[key] = self._outcome(key).failed(now, exc.message)
            return RepoReport(repo, error=exc.message)
        self._failures.pop(key, None)
        self.polls[key] = self._outcome(key).succeeded(now)
        return report

    def _outcome(self, key: str) -> heartbeats_db.PollOutcome:
        return self.polls.get(key) or heartbeats_db.PollOutcome()

    # -- plumbing ---------------------------------------------------------------------------------

    def _idle_report(self, idle: str) -> CycleReport:
        if idle != self._idle:
            log.info(idle)  # once per idle spell, not every tick
        self._idle = idle
        return CycleReport(idle=idle)

    def _targets(self) -> tuple[list[str], str | None]:
        """The repositories to poll, or why there are none (read from the rules every cycle:
        only the enabled rules with a GitHub trigger are validated, not a cluster's schedules)."""
        with self.session_factory() as session:
            rules = rule_triggers.rules_with_trigger(session, GITHUB, prefix=True)
        triggers = [t for rule in rules for t in rule.triggers if t.type.startswith(GITHUB)]
        if not triggers:
            return [], NO_RULES
        self._idle = None
        repos = self.repos or unique_repos(
            repo for trigger in triggers if isinstance(repo := getattr(trigger, "repo", None), str)
        )
        return (repos, None) if repos else ([], NO_REPOS)

    def _prepare(self, repos: Sequence[str]) -> None:
        """On the first cycle: write `since` and import the legacy cursor file."""
        if self._prepared:
            return
        now = self.clock()
        with self.session_factory.begin() as session:
            filled = None
            if self.legacy_file is not None:
                filled = poll_cursors.import_legacy_file(
                    session, self.legacy_file, repos, by=self.owner, now=now
                )
            for repo, when in self.since.items():
                poll_cursors.write(session, repo, when, by=self.owner, now=now)
        if filled is not None and self.legacy_file is not None:
            done = poll_cursors.retire_legacy_file(self.legacy_file)
            log.warning(
                "imported the legacy cursor file into the database (%s) and renamed it to %s",
                ", ".join(filled) or "no repository lacked a cursor",
                done,
            )
        self._prepared = True
