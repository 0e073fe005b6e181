"""`make bench` end to end at a small size (bench/dispatch.py): a raw Celery worker, one with a
PostgreSQL result backend and an ADE worker run side by side on real Redis and PostgreSQL, the
sides take turns, and the ADE worker's app reports each finished run so the bench waits without
polling the database. A hook that did
not fire, a worker that did not start or a run that failed makes the bench exit non-zero."""

from __future__ import annotations

import os
import re

import pytest
import redis
from sqlalchemy import text

from ade_tasks.db.engine import create_db_engine
from bench.dispatch import main
from bench.dispatch_durable import LABEL
from tests.integration.conftest import PG_ADMIN_URL


def test_a_small_bench_measures_every_side_in_turns_and_leaves_nothing_behind(
    redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--n", "6", "--rounds", "2", "--latency-n", "12", "--warmup", "2", "--timeout", "90"]

    status = main([*argv, "--admin-url", PG_ADMIN_URL, "--redis-url", redis_url])

    out = capsys.readouterr().out
    assert status == 0, out
    labels = ("raw celery no-op", "raw celery `true` subprocess", LABEL, "ADE run-command true")
    for label in labels:
        assert re.search(rf"^{re.escape(label)} +[0-9.]+ \w+/s .* p50 +[0-9.]+ ms", out, re.M), out
    rounds = re.search(r"round by round: ([0-9.]+), ([0-9.]+)\)", out)
    assert rounds is not None and all(float(ratio) > 0 for ratio in rounds.groups()), out
    assert "p50 breakdown: dispatch() call" in out
    durable = re.search(
        r"ADE / durable-celery throughput = [0-9.]+ .*round by round: ([0-9.]+), ([0-9.]+)\)", out
    )
    assert durable is not None and all(float(ratio) > 0 for ratio in durable.groups()), out
    # the scratch database is dropped and the bench's Redis database flushed
    admin = create_db_engine(PG_ADMIN_URL)
    try:
        with admin.connect() as connection:
            left = connection.execute(
                text("SELECT count(*) FROM pg_database WHERE datname = :name"),
                {"name": f"ade_bench_{os.getpid()}"},
            ).scalar()
    finally:
        admin.dispose()
    assert left == 0
    assert redis.Redis.from_url(redis_url).dbsize() == 0
