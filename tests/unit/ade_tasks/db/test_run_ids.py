"""Run ids name the month their run was queued in (`ade_tasks.db.run_ids`), and their first
eight characters, the short id operators use, stay random."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta, timezone

import pytest

from ade_tasks.db.run_ids import new_run_id, queued_month

DECEMBER = datetime(2026, 12, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("queued_at", "month"),
    [
        (datetime(2026, 12, 6, 4, 13, 7, 123456, tzinfo=UTC), DECEMBER),
        (DECEMBER, DECEMBER),  # the month's first instant
        (DECEMBER - timedelta(microseconds=1), datetime(2026, 11, 1, tzinfo=UTC)),  # its last
        # 00:59 on New Year's Day at UTC+2 is still December in UTC
        (datetime(2027, 1, 1, 0, 59, tzinfo=timezone(timedelta(hours=2))), DECEMBER),
        (datetime(1970, 1, 1, tzinfo=UTC), datetime(1970, 1, 1, tzinfo=UTC)),
    ],
)
def test_an_id_names_the_utc_month_of_its_queued_at(queued_at: datetime, month: datetime) -> None:
    run_id = new_run_id(queued_at)

    parsed = uuid.UUID(run_id)
    assert (parsed.version, parsed.variant, str(parsed)) == (8, uuid.RFC_4122, run_id)
    assert queued_month(run_id) == month


def test_ids_of_the_same_moment_differ_in_their_short_id() -> None:
    moment = datetime(2026, 12, 6, tzinfo=UTC)

    ids = [new_run_id(moment) for _ in range(1000)]

    assert len(set(ids)) == 1000
    # 32 random bits: two of 1,000 ids share a short id in about one run of this in 10,000
    assert len({run_id[:8] for run_id in ids}) >= 998


@pytest.mark.parametrize(
    "queued_at", [datetime(1969, 12, 31, tzinfo=UTC), datetime(2311, 5, 1, tzinfo=UTC)]
)
def test_a_moment_outside_the_ids_range_is_refused_with_it(queued_at: datetime) -> None:
    with pytest.raises(ValueError, match=f"queued at {queued_at.year}.* out of the ids' range"):
        new_run_id(queued_at)


@pytest.mark.parametrize(
    "run_id",
    [
        "331ffd08-3465-4b63-8cba-bcd8780509bc",  # a uuid4: a run from before ids named months
        "01932c07-8b7a-7c2e-9f3b-5d4e6a7b8c9d",  # a UUIDv7: version 7 where 8 would be
        "run-1",
        "zzzzzzzz-zzzz-8zzz-8zzz-zzzzzzzzzzzz",
        "",
    ],
)
def test_an_id_of_another_form_names_no_month(run_id: str) -> None:
    assert queued_month(run_id) is None
