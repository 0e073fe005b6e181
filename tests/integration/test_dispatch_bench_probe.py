"""`make bench`'s commit probe (bench/dispatch.py) on real PostgreSQL: it times durable commits by
the driver, each one a row that is really there afterwards, and hands its connection back to the
pool as it found it."""

from __future__ import annotations

from sqlalchemy import text

from ade_tasks.db.engine import create_db_engine
from bench.dispatch import probe_commits


def test_the_probe_commits_each_row_it_times_and_leaves_the_pool_transactional(
    database_url: str,
) -> None:
    engine = create_db_engine(database_url)
    try:
        probe = probe_commits(engine, 4)

        assert len(probe.after_idle) == len(probe.back_to_back) == 4
        assert all(0 < seconds < 5 for seconds in probe.after_idle + probe.back_to_back)
        # committed: another connection sees every probed row
        with engine.connect() as connection:
            assert connection.execute(text("SELECT count(*) FROM bench_commit_probe")).scalar() == 8
            driver = connection.connection.driver_connection
            assert driver is not None and driver.autocommit is False
    finally:
        engine.dispose()
