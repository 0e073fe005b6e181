"""A worker that cannot renew its run's lease stops the run before the lease runs out, so the
recovery sweep never hands a run to a second worker while the first still runs its command."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

from ade_tasks.settings import Settings
from ade_workers.engine.run_monitor import RunMonitor, Watch

SETTINGS = Settings(lease_seconds=10, heartbeat_seconds=1, kill_grace_seconds=2)


class UnreachableDatabase:
    """Sessions whose every transaction fails, as from a host cut off from the database."""

    @contextlib.contextmanager
    def begin(self) -> Iterator[None]:
        raise ConnectionRefusedError("connection to 10.0.0.5:5432 refused")
        yield


class ReachableDatabase:
    """Sessions in which renewing the lease succeeds."""

    @contextlib.contextmanager
    def begin(self) -> Iterator[None]:
        yield None


def watch(sessions: object) -> tuple[Watch, float]:
    """A watch of a run leased now (monotonic clock), and that moment."""
    leased_at = time.monotonic()
    return Watch(RunMonitor(), sessions, "run-1", "w1", SETTINGS, leased_at), leased_at  # type: ignore[arg-type]


def test_unrenewable_lease_stops_the_run_before_it_expires() -> None:
    fence, t0 = watch(UnreachableDatabase())
    # Lease held until t0 + 10; the step's processes need kill_grace (2 s) + 0.5 s to stop.
    for later in (1.0, 3.0, 5.0, 7.0):
        fence.tend(t0 + later)
        assert not fence.lost.is_set(), later
    fence.tend(t0 + 7.6)
    assert fence.lost.is_set()


def test_renewed_lease_keeps_the_run_going(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr("ade_workers.engine.run_monitor.runs_db.renew_lease", lambda *_: True)
    kept, t0 = watch(ReachableDatabase())
    for later in range(1, 40):
        kept.tend(t0 + later)
    assert not kept.lost.is_set()
