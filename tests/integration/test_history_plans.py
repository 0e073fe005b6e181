"""The run history's queries at scale on PostgreSQL: every statement the API issues for a page of
runs (each filter, a deep cursor page) and for a run's detail and events reads a bounded number of
rows through an index, never a sequential scan of the runs, steps or events, nor a sort of more
rows than a page.

200,000 runs (the mix of `bench/run_history.py`, with steps and events for some), queued over the
last 150 days so they lie in six monthly partitions (migration 0020), are filled with
`generate_series` and ANALYZEd; the requests go through the real app in this process, the
statements they issue are captured from the engine and run again under
`EXPLAIN (ANALYZE, FORMAT JSON)` with the same parameters.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlencode

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, event
from sqlalchemy.orm import Session

from ade_api.http.app import create_app
from ade_tasks.access.roles import Role
from ade_tasks.clock import utcnow
from ade_tasks.db import partitions as partitions_db
from ade_tasks.db import tokens as tokens_db
from ade_tasks.db.engine import create_db_engine, create_session_factory
from ade_tasks.settings import Settings
from bench.history import filters
from bench.run_history import fill_history, run_id_of

RUNS = 200_000
RULES = 100
SPAN = timedelta(days=150)
#: The history's own tables; other tables (tokens, approvals) are tiny and may be scanned.
HISTORY_TABLES = {"runs", "run_steps", "run_events"}
#: The most rows a statement may read from them: a page (101 rows) and a few its filter skips.
#: Page 15 by a cursor the index does not start at would read 1,500.
MOST_ROWS = 1_000
#: The longest a history statement may take under EXPLAIN ANALYZE (a page takes a few ms).
MOST_MS = 500
_PARTITION = re.compile(r"^(runs|run_steps|run_events)_(p\d{4}_\d{2}|default)$")


@pytest.fixture
def history(database_url: str) -> Iterator[tuple[Engine, TestClient]]:
    engine = create_db_engine(database_url)
    sessions = create_session_factory(engine)
    end = utcnow()
    with sessions.begin() as session:  # the months before the migration's first
        partitions_db.create_months(session, end - SPAN, end)
    fill_history(sessions, RUNS, RULES, end=end, transcripts=True, span=SPAN.total_seconds())
    with sessions.begin() as session:
        _, token = tokens_db.create_token(session, "plans", Role.VIEWER, "tests")
    app = create_app(Settings(database_url=database_url), session_factory=sessions)
    with TestClient(app, headers={"Authorization": f"Bearer {token}"}) as client:
        yield engine, client
    engine.dispose()


def issued(engine: Engine, client: TestClient, path: str) -> list[tuple[str, Any]]:
    """The SELECTs of the history tables that GET `path` issued, with their parameters."""
    seen: list[tuple[str, Any]] = []

    def capture(_conn: object, _cursor: object, statement: str, parameters: Any,
                _context: object, _many: bool) -> None:  # fmt: skip
        if statement.lstrip().upper().startswith("SELECT") and any(
            table in statement for table in HISTORY_TABLES
        ):
            seen.append((statement, parameters))

    event.listen(engine, "before_cursor_execute", capture)
    try:
        answer = client.get(path)
    finally:
        event.remove(engine, "before_cursor_execute", capture)
    assert answer.status_code == 200, answer.text
    assert seen, f"GET {path} read none of {sorted(HISTORY_TABLES)}"
    return seen


def nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from nodes(child)


def explain(engine: Engine, statement: str, parameters: Any) -> dict[str, Any]:
    with engine.connect() as connection:
        (document,) = connection.exec_driver_sql(
            "EXPLAIN (ANALYZE, FORMAT JSON) " + statement, parameters
        ).one()
    return dict(document[0])


def table_of(relation: str | None) -> str | None:
    """The history table a relation is (or is a partition of)."""
    match = _PARTITION.match(relation or "")
    return match.group(1) if match else relation


def scanned(plan: dict[str, Any], table: str) -> set[str]:
    """The monthly partitions of `table` the plan read (executed at least once). The DEFAULT
    partition is left out: it may hold any time, so no plan prunes it (it is empty here)."""
    return {
        node["Relation Name"]
        for node in nodes(plan["Plan"])
        if table_of(node.get("Relation Name")) == table
        and node.get("Actual Loops", 0) > 0
        and node["Relation Name"] != f"{table}_default"
    }


def problems(engine: Engine, statement: str, parameters: Any) -> list[str]:
    """What is wrong with the statement's plan: scans of whole tables, too many rows read, too
    long."""
    document = explain(engine, statement, parameters)
    found, read = [], 0
    for node in nodes(document["Plan"]):
        kind, table = node["Node Type"], table_of(node.get("Relation Name"))
        if table in HISTORY_TABLES:
            rows = node["Actual Rows"] * node["Actual Loops"] + node.get(
                "Rows Removed by Filter", 0
            )
            # An empty partition (a month to come, the DEFAULT one) is scanned, not indexed: it
            # reads nothing. A scan that reads rows is the fault.
            if kind == "Seq Scan" and rows > 0:
                found.append(f"a sequential scan of {node['Relation Name']} ({rows:,} rows)")
            read += rows
        if kind == "Sort" and node["Plans"][0]["Actual Rows"] > 501:
            found.append(f"a sort of {node['Plans'][0]['Actual Rows']:,} rows")
    if read > MOST_ROWS:
        found.append(f"{read:,} rows read (at most {MOST_ROWS:,})")
    if document["Execution Time"] > MOST_MS:
        found.append(f"{document['Execution Time']:.0f} ms (at most {MOST_MS} ms)")
    return found


def deep_cursor(client: TestClient, query: str, pages: int) -> str:
    """The cursor of page `pages + 1`, following `next_cursor`s."""
    cursor = ""
    for _ in range(pages):
        answer = client.get(
            f"/api/v1/runs?limit=100{query}" + (f"&cursor={cursor}" if cursor else "")
        )
        cursor = answer.json()["next_cursor"]
        assert cursor, f"the history of {query or 'all runs'} ended before page {pages + 1}"
    return cursor


def paths(client: TestClient) -> dict[str, str]:
    """label -> the GET to check: every filter, deep pages, a run's detail and its events."""
    found = {f"runs {label}": "/api/v1/runs?" + urlencode({**params, "limit": "100"})
             for label, params in filters(RUNS).items()}  # fmt: skip
    for label, query in (("page 15", ""), ("page 15 of rule-7", "&rule=rule-7")):
        found[label] = f"/api/v1/runs?limit=100{query}&cursor={deep_cursor(client, query, 14)}"
    detailed = run_id_of("h", RUNS // 2)  # every 200th run has steps and events
    found["run detail"] = f"/api/v1/runs/{detailed}"
    found["its events"] = f"/api/v1/runs/{detailed}/events?limit=100"
    return found


def test_every_history_query_reads_a_bounded_range_of_an_index(
    history: tuple[Engine, TestClient],
) -> None:
    # Given a history of 200,000 runs, analyzed
    engine, client = history
    # When each history request's statements are explained with their parameters
    wrong = [
        f"{label}: {found} in {' '.join(statement.split())[-240:]}"
        for label, path in paths(client).items()
        for statement, parameters in issued(engine, client, path)
        if (found := problems(engine, statement, parameters))
    ]
    # Then none scans a whole table or reads more than a page's neighbourhood
    assert not wrong, "\n".join(wrong)


def page_plan(engine: Engine, client: TestClient, path: str) -> dict[str, Any]:
    """The plan of the page of runs GET `path` read (not its catalog reads)."""
    (statement, parameters), *_ = [
        (statement, parameters)
        for statement, parameters in issued(engine, client, path)
        if "ORDER BY runs.queued_at DESC" in statement
    ]
    return explain(engine, statement, parameters)


def test_history_pages_read_only_the_months_they_show(
    history: tuple[Engine, TestClient],
) -> None:
    # Given six months of history in monthly partitions
    engine, client = history
    with Session(engine) as session:
        held = {p.name: p for p in partitions_db.partitions(session, "runs")}
    assert len([p for p in held.values() if p.start < utcnow()]) >= 6
    # When a page of one day 100 days ago is explained
    day = utcnow() - timedelta(days=100)
    window = {"since": day.isoformat(), "until": (day + timedelta(hours=6)).isoformat()}
    one_day = scanned(page_plan(engine, client, "/api/v1/runs?" + urlencode(window)), "runs")
    # Then only that day's month is read
    assert one_day == {partitions_db.partition_name("runs", partitions_db.month_start(day))}
    # When the page after a cursor 100 days back is explained
    first = client.get("/api/v1/runs", params={"until": day.isoformat(), "limit": "5"}).json()
    cursor = first["next_cursor"]
    after_cursor = scanned(
        page_plan(engine, client, f"/api/v1/runs?limit=100&cursor={cursor}"), "runs"
    )
    # Then no month newer than the cursor's is read (the plan prunes them)
    cursor_at = datetime.fromisoformat(first["items"][-1]["queued_at"])
    assert after_cursor, "the page read no partition"
    assert all(held[name].start <= cursor_at for name in after_cursor), after_cursor
