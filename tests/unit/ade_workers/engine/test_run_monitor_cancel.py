"""A worker reads its running run's row for a cancel twice a second, so a cancel stops the step
at once instead of at the next lease renewal, and a run stopped on purpose is no warning."""

from __future__ import annotations

import logging

import pytest

from ade_workers.engine.run_monitor import CANCEL_CHECK
from tests.unit.ade_workers.engine.test_run_monitor_lease import ReachableDatabase, watch


def test_a_cancel_is_seen_at_the_next_check_long_before_the_heartbeat(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a watched run whose lease renews fine (heartbeat every second) and that is cancelled
    monkeypatch.setattr("ade_workers.engine.run_monitor.runs_db.renew_lease", lambda *_: True)
    monkeypatch.setattr("ade_workers.engine.run_monitor.runs_db.is_cancelled", lambda *_: True)
    run, t0 = watch(ReachableDatabase())
    # When the monitor tends it before and after the first cancel check
    run.tend(t0 + CANCEL_CHECK / 2)
    assert not run.lost.is_set()
    with caplog.at_level(logging.INFO, logger="ade_workers.engine.run_monitor"):
        run.tend(t0 + CANCEL_CHECK + 0.01)
    # Then it is stopped as cancelled, with an info line and no warning
    assert run.cancelled.is_set() and run.lost.is_set()
    assert [r.levelno for r in caplog.records] == [logging.INFO]
    assert "run-1 was cancelled" in caplog.records[0].getMessage()


def test_a_refused_renewal_of_a_cancelled_run_is_no_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a run cancelled between two checks, when its renewal comes first
    answers = iter([False, True])  # not yet cancelled at the check, then cancelled
    monkeypatch.setattr(
        "ade_workers.engine.run_monitor.runs_db.is_cancelled", lambda *_: next(answers)
    )
    monkeypatch.setattr("ade_workers.engine.run_monitor.runs_db.renew_lease", lambda *_: False)
    run, t0 = watch(ReachableDatabase())
    with caplog.at_level(logging.INFO, logger="ade_workers.engine.run_monitor"):
        run.tend(t0 + 1.01)  # the cancel check and the heartbeat (1 s) both due
    assert run.cancelled.is_set() and run.lost.is_set()
    assert all(r.levelno < logging.WARNING for r in caplog.records), caplog.records


def test_a_run_taken_over_elsewhere_still_warns(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr("ade_workers.engine.run_monitor.runs_db.is_cancelled", lambda *_: False)
    monkeypatch.setattr("ade_workers.engine.run_monitor.runs_db.renew_lease", lambda *_: False)
    run, t0 = watch(ReachableDatabase())
    run.tend(t0 + 1.01)
    assert run.lost.is_set() and not run.cancelled.is_set()
    assert "recovered elsewhere" in caplog.text
