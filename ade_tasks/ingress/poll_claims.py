"""Who polls a repository when: one claimed slot per repository and interval, and backoff.

Time is cut into slots of the poll interval; each slot of each repository is claimed in
`schedule_occurrences` under the pseudo rule `__github_poll__` (the repository, in lower case,
in the `cron` column), exactly as the beats claim housekeeping slots, so one process per slot
polls. A process that dies leaves the next slot to the others: failover within one interval
(plus the tick, about a second, at which pollers offer slots).
Backoff (`ade_tasks.retry.Backoff`) is held the same way: a failed poll claims (as skipped) the
slots its wait covers, so no process polls that repository before the wait is over.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from sqlalchemy import select
from sqlalchemy.exc import OperationalError

from ade_tasks.db import occurrences as occ_db
from ade_tasks.db.engine import SessionFactory
from ade_tasks.db.occurrences import OccurrenceKey
from ade_tasks.db.schema import ScheduleOccurrenceRow
from ade_tasks.states import OccurrenceOutcome

log = logging.getLogger(__name__)

POLL_CLAIMS = "__github_poll__"
LOCK_TIMEOUT = timedelta(seconds=2)


class PollClaims:
    """The slots of the repositories one process (`owner`) polls, `interval` seconds each."""

    def __init__(self, session_factory: SessionFactory, owner: str, interval: float) -> None:
        self._session_factory = session_factory
        self._owner = owner
        self._interval = timedelta(seconds=interval)
        self._tried: dict[str, datetime] = {}

    def slot(self, now: datetime) -> datetime:
        """The start of the interval `now` falls in."""
        period = self._interval.total_seconds()
        return datetime.fromtimestamp(now.timestamp() // period * period, UTC)

    def untried(self, repos: Sequence[str], slot: datetime) -> list[str]:
        """The repositories this process has not offered to poll in `slot` yet."""
        return [repo for repo in repos if self._tried.get(repo.lower()) != slot]

    def claim(self, repos: Sequence[str], slot: datetime) -> list[str]:
        """The repositories whose `slot` this process won (each is offered once per slot)."""
        for repo in repos:
            self._tried[repo.lower()] = slot
        keys = {OccurrenceKey(POLL_CLAIMS, 0, repo.lower(), slot): repo for repo in repos}
        if not keys:
            return []
        try:
            with self._session_factory.begin() as session:
                occ_db.bound_lock_waits(session, LOCK_TIMEOUT)
                won = occ_db.claim(session, list(keys), self._owner, OccurrenceOutcome.FIRED)
        except OperationalError as exc:
            if not occ_db.is_lock_timeout(exc):
                raise
            for repo in repos:  # another process is mid-claim; offer again next tick
                self._tried.pop(repo.lower(), None)
            return []
        return [keys[key] for key in won]

    def hold(self, repo: str, now: datetime, until: datetime) -> int:
        """Claim (as skipped) the slots of `repo` after the current one that start before
        `until`, so no process polls it during a backoff; how many this process got."""
        with self._session_factory.begin() as session:
            return occ_db.hold(
                session, POLL_CLAIMS, repo.lower(), slot=self.slot(now), every=self._interval,
                until=until, owner=self._owner,
            )  # fmt: skip

    def holder(self, repo: str, slot: datetime) -> str:
        """Who claimed `slot` of `repo`."""
        with self._session_factory() as session:
            holder = session.scalar(
                select(ScheduleOccurrenceRow.claimed_by).where(
                    ScheduleOccurrenceRow.rule_id == POLL_CLAIMS,
                    ScheduleOccurrenceRow.cron == repo.lower(),
                    ScheduleOccurrenceRow.slot == slot,
                )
            )
        return str(holder or "another process")
