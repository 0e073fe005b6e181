"""Sync a rules directory into the database."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy.exc import IntegrityError

from ade_tasks.db.engine import SessionFactory
from ade_tasks.db.rule_sync import SyncReport, known_files, sync_file_rules
from ade_tasks.rules.gc_pause import paused_gc
from ade_tasks.rules.loader import LoadResult, load_rules_dir


def sync_rules_dir(
    session_factory: SessionFactory, directory: Path
) -> tuple[LoadResult, SyncReport]:
    """Load every rule file and upsert the valid rules; problems are returned, not raised.

    Files whose bytes did not change since the rules table last saw them are not parsed again
    (`ade_tasks.rules.file_digests`); the rest are parsed in worker processes when there are
    many (`ade_tasks.rules.file_pool`).

    Two processes starting at once may race to insert the same new rule; the loser retries
    once and then sees the winner's rows.
    """
    with session_factory() as session:  # a snapshot to skip unchanged files; compared again
        known = known_files(session)
    loaded = load_rules_dir(directory, known)
    for attempt in range(2):
        try:
            with paused_gc(), session_factory.begin() as session:
                report = sync_file_rules(session, loaded.rules, remove_missing=not loaded.problems)
            return loaded, report
        except IntegrityError:
            if attempt:
                raise
    raise AssertionError("unreachable")
