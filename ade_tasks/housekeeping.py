"""Housekeeping jobs driven by the beats and claimed like schedule occurrences.

Every beat ticks the same jobs; each job's period slot (e.g. the 30-second window of the recovery
sweep) is claimed in `schedule_occurrences` under the pseudo-rule `HOUSEKEEPING`, so however many
beats run, each slot's job runs once. Later features add their sweeps with `job(...)` (the deferred
lane-cleanup sweep registers itself here).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy.exc import OperationalError

from ade_tasks.db import ingress as ingress_db
from ade_tasks.db import occurrences as occ_db
from ade_tasks.db import one_shots as once_db
from ade_tasks.db import partitions as partitions_db
from ade_tasks.db import run_rollups
from ade_tasks.db import runs as runs_db
from ade_tasks.db import schedule_shards as shards_db
from ade_tasks.db.engine import SessionFactory
from ade_tasks.db.occurrences import OccurrenceKey
from ade_tasks.runs.recovery import recover
from ade_tasks.runs.senders import TaskSender
from ade_tasks.settings import Settings
from ade_tasks.states import OccurrenceOutcome
from ade_tasks.triggers.finished_runs import sweep_finished_runs

log = logging.getLogger(__name__)

HOUSEKEEPING = "__housekeeping__"
LOCK_TIMEOUT = timedelta(seconds=2)


@dataclass(frozen=True)
class Job:
    """A periodic job: its name, its period and what it does."""

    name: str
    every: timedelta
    run: Callable[[datetime], object]

    def slot(self, now: datetime) -> datetime:
        """The start of the period `now` falls in."""
        period = self.every.total_seconds()
        return datetime.fromtimestamp(now.timestamp() // period * period, UTC)


#: Makes a registered job from a process's parts; None: nothing to do with these settings.
JobFactory = Callable[[SessionFactory, TaskSender, Settings], Job | None]
_REGISTERED: list[JobFactory] = []


def register(factory: JobFactory) -> JobFactory:
    """Add a job to every beat's housekeeping (for features that own a sweep of their own)."""
    _REGISTERED.append(factory)
    return factory


def standard_jobs(
    session_factory: SessionFactory, sender: TaskSender, settings: Settings
) -> list[Job]:
    """The recovery sweep, retention pruning every hour (schedule occurrences, ingress events,
    settled scheduled runs, and runs when `run_retention_days` is set), the history's partitions
    every hour on PostgreSQL (`maintain_partitions`), the metrics' run rollup every minute, the
    run.finished sweep as often as the recovery sweep (`ade_tasks.triggers.finished_runs`), and
    every registered job."""

    def sweep(_now: datetime) -> object:
        return recover(
            session_factory,
            sender,
            requeue_after=timedelta(seconds=settings.requeue_after_seconds),
        )

    def prune(now: datetime) -> object:
        with session_factory.begin() as session:
            pruned = {
                "occurrences": occ_db.prune(session, now),
                "schedule_shards": shards_db.prune(session, now),
                "ingress_events": ingress_db.prune(session, now),
                # settled only: a pending or claimed run is still to fire, however old
                "scheduled_runs": once_db.prune(session, now),
            }
            # A partitioned history drops whole months instead (the `partitions` job).
            if settings.run_retention_days and not partitions_db.is_partitioned(session):
                cutoff = now - timedelta(days=settings.run_retention_days)
                pruned["runs"] = runs_db.prune_finished(session, cutoff)
        return pruned

    def roll_up(now: datetime) -> object:
        with session_factory.begin() as session:
            return run_rollups.advance(session, now)

    def follow(now: datetime) -> object:
        disabled = settings.disable_automations
        return sweep_finished_runs(session_factory, sender, now, automations_disabled=disabled)

    def partition(now: datetime) -> object:
        return maintain_partitions(session_factory, now, settings.run_retention_days)

    return [
        Job("recover", timedelta(seconds=settings.recovery_interval_seconds), sweep),
        Job("prune", timedelta(hours=1), prune),
        Job("partitions", PARTITION_JOB_EVERY, partition),
        Job("rollup", timedelta(minutes=1), roll_up),
        Job("run-finished", timedelta(seconds=settings.recovery_interval_seconds), follow),
        *(job for factory in _REGISTERED if (job := factory(session_factory, sender, settings))),
    ]


#: How often the partition job runs: a failed pass (disk full, a lock timeout) is repeated this
#: much later, months before the current month's partition ends (`partitions_db.AHEAD`).
PARTITION_JOB_EVERY = timedelta(hours=1)


def maintain_partitions(
    session_factory: SessionFactory, now: datetime, retention_days: int | None
) -> dict[str, object]:
    """Make the coming months' partitions, then drop the expired ones (with `retention_days`),
    each in its own transaction; a failure is logged as an error, reported in the result, and
    repeated at the job's next slot. Nothing to do where the history is not partitioned. The
    metrics' `ade_history_partition_ahead_seconds` shows how long the made months still last."""
    result: dict[str, object] = {}
    try:
        with session_factory.begin() as session:
            if not partitions_db.is_partitioned(session):
                return result
            result["created"] = partitions_db.create_ahead(session, now)
            facts = partitions_db.partition_facts(session, now)
        stray = {
            table: rows for table, rows in (facts.default_rows if facts else {}).items() if rows
        }
        if stray:
            log.warning(
                "history partitions: rows in the DEFAULT partitions %s (no month's partition "
                "covers their time: a clock far off, or history older than the partitions)",
                stray,
            )
    except Exception as exc:
        log.error(
            "history partitions: the coming months' partitions were not created (%s: %s); the "
            "job tries again in %s; ade_history_partition_ahead_seconds shows how long the "
            "partitions made still last",
            type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "", PARTITION_JOB_EVERY,
        )  # fmt: skip
        result["create_error"] = type(exc).__name__
    if not retention_days:
        return result
    try:
        with session_factory.begin() as session:
            dropped = partitions_db.drop_expired(session, now - timedelta(days=retention_days))
            result["dropped"], result["default_runs"] = dropped.partitions, dropped.default_runs
    except Exception as exc:
        log.error("history partitions: expired partitions were not dropped (%s); the job tries "
                  "again in %s", type(exc).__name__, PARTITION_JOB_EVERY)  # fmt: skip
        result["drop_error"] = type(exc).__name__
    return result


class Housekeeping:
    """Runs each job once per period across all beats."""

    def __init__(self, session_factory: SessionFactory, beat_id: str, jobs: list[Job]) -> None:
        self._session_factory = session_factory
        self._beat_id = beat_id
        self._jobs = jobs
        self._seen: dict[str, datetime] = {}

    def tick(self, now: datetime) -> dict[str, object]:
        """Claim the current slot of every job not yet tried in it; run the ones won."""
        due = {}
        for job in self._jobs:
            slot = job.slot(now)
            if self._seen.get(job.name) != slot:
                self._seen[job.name] = slot
                due[OccurrenceKey(HOUSEKEEPING, 0, job.name, slot)] = job
        if not due:
            return {}
        try:
            with self._session_factory.begin() as session:
                occ_db.bound_lock_waits(session, LOCK_TIMEOUT)
                won = occ_db.claim(session, list(due), self._beat_id, OccurrenceOutcome.FIRED)
        except OperationalError as exc:
            if not occ_db.is_lock_timeout(exc):
                raise
            for key in due:  # another beat holds these slots mid-claim; ask again next tick
                self._seen.pop(key.cron, None)
            return {}
        results = {}
        for key in won:
            try:
                results[key.cron] = due[key].run(now)
            except Exception:  # one failing job must not stop the beat or the others
                log.exception("housekeeping job %s failed", key.cron)
        return results
