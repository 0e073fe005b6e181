"""`tests/unit/ade_tasks/runs/test_concurrency_keys.py` on PostgreSQL (the key's lock an advisory lock, on the
partitioned runs table), and two deliveries of
one key dispatched at the same moment from two threads: exactly one run survives."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from ade_tasks.db.engine import SessionFactory, create_db_engine, create_session_factory
from ade_tasks.runs.dispatch import dispatch
from ade_tasks.testing import InMemorySender
from tests.integration.test_dispatch_seen_pg import rules_dir, sender  # noqa: F401 (fixtures)
from tests.unit.ade_tasks.runs.test_concurrency_keys import (  # noqa: F401 (the tests, run here)
    keyed_rule,
    pushed,
    row,
    test_a_key_that_cannot_render_refuses_the_trigger_and_records_no_run,
    test_queue_holds_a_second_run_of_the_key_until_the_first_ends_and_other_keys_run,
    test_skip_records_the_new_run_skipped_naming_the_run_that_holds_the_key,
    test_supersede_cancels_a_run_still_queued_and_starts_the_new_one,
    test_supersede_cancels_a_running_run_which_can_no_longer_record_an_outcome,
    test_supersede_within_one_batch_leaves_exactly_one_run,
    test_the_sweep_releases_a_queued_run_whose_key_holder_was_lost,
)


@pytest.fixture
def session_factory(database_url: str) -> Iterator[SessionFactory]:
    """Sessions with transactions (the key locks are transaction-scoped)."""
    engine = create_db_engine(database_url)
    yield create_session_factory(engine)
    engine.dispose()


@pytest.mark.parametrize(
    ("on_new", "outcomes"),
    [
        ("supersede", [("cancelled", False), ("queued", False)]),
        ("skip", [("queued", False), ("skipped", False)]),
        ("queue", [("queued", False), ("queued", True)]),
    ],
)
def test_two_deliveries_of_one_key_at_once_leave_exactly_one_run_going(
    session_factory: SessionFactory,
    rules_dir: Path,  # noqa: F811
    sender: InMemorySender,  # noqa: F811
    on_new: str,
    outcomes: list[tuple[str, bool]],
) -> None:
    # Given a rule keyed by PR, and two pushes to PR 7 delivered at the same moment
    keyed_rule(session_factory, rules_dir, on_new)
    barrier, ids, errors = threading.Barrier(2), [], []

    def deliver(delivery: str) -> None:
        try:
            barrier.wait(5)
            ids.append(dispatch(session_factory, sender, "fix", pushed(7, delivery)).run.id)
        except Exception as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=deliver, args=(f"d{n}",)) for n in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    # Then one run holds the key and the other did what on_new says
    assert errors == [] and len(ids) == 2
    assert sorted(row(session_factory, run_id)[:2] for run_id in ids) == outcomes
    assert len(sender.sent) == (2 if on_new == "supersede" else 1)
