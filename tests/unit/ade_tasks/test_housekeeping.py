"""Housekeeping jobs run once per period however many beats tick them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from ade_tasks.db.engine import SessionFactory
from ade_tasks.housekeeping import Housekeeping, Job


def test_each_period_runs_once_across_beats(session_factory: SessionFactory) -> None:
    ran: list[tuple[str, datetime]] = []
    jobs = [Job("count", timedelta(seconds=30), lambda now: ran.append(("count", now)))]
    beats = [Housekeeping(session_factory, f"beat-{n}", jobs) for n in range(3)]
    start = datetime(2026, 11, 30, 10, 0, 0, tzinfo=UTC)
    for second in range(0, 120, 5):  # two minutes, every beat ticking every 5 s
        for beat in beats:
            beat.tick(start + timedelta(seconds=second))
    assert [now.strftime("%M:%S") for _, now in ran] == ["00:00", "00:30", "01:00", "01:30"]


def test_a_failing_job_does_not_stop_the_others(session_factory: SessionFactory) -> None:
    def broken(_now: datetime) -> None:
        raise RuntimeError("boom")

    jobs = [
        Job("broken", timedelta(minutes=1), broken),
        Job("fine", timedelta(minutes=1), lambda _now: "done"),
    ]
    results = Housekeeping(session_factory, "beat", jobs).tick(datetime(2026, 1, 1, tzinfo=UTC))
    assert results == {"fine": "done"}


def test_registered_jobs_join_the_standard_ones(session_factory: SessionFactory) -> None:
    from ade_tasks import housekeeping
    from ade_tasks.settings import Settings
    from ade_tasks.testing import InMemorySender

    def sweep_factory(*_args: object) -> Job:
        return Job("cleanups", timedelta(seconds=60), lambda _now: "swept")

    housekeeping.register(sweep_factory)
    try:
        jobs = housekeeping.standard_jobs(session_factory, InMemorySender(), Settings())
    finally:
        housekeeping._REGISTERED.remove(sweep_factory)
    names = [job.name for job in jobs]
    assert names[:2] == ["recover", "prune"] and names[-1] == "cleanups"
    results = Housekeeping(session_factory, "beat", jobs[-1:]).tick(
        datetime(2026, 1, 1, tzinfo=UTC)
    )
    assert results == {"cleanups": "swept"}


def test_the_beat_runs_the_lane_cleanup_sweep_every_minute(session_factory: SessionFactory) -> None:
    import ade_workers.celery.beat  # noqa: F401  (the beat imports the sweep, which registers it)
    from ade_tasks import housekeeping
    from ade_tasks.settings import Settings
    from ade_tasks.testing import InMemorySender

    jobs = housekeeping.standard_jobs(session_factory, InMemorySender(), Settings())

    (sweep,) = [job for job in jobs if job.name == "lane-cleanups"]
    assert sweep.every == timedelta(seconds=60)
