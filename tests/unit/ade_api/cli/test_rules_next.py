"""`ade-tasks rules next` against an in-memory API that answers what the schedule endpoint computes
on SQLite: a trigger that cannot fire shows its problem, not an empty list of times."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

from ade_api.cli import main
from ade_api.cli import root as cli
from ade_api.http.routes.rule_schedule import schedule_preview
from ade_tasks.db.engine import SessionFactory
from ade_tasks.errors import InvalidInputError
from tests.unit.ade_tasks.schedule.test_scheduler_boundaries import IMPOSSIBLE, store_rule

Answer = Callable[[dict[str, Any]], None]


@pytest.fixture
def api_answers(monkeypatch: pytest.MonkeyPatch) -> Answer:
    """Make the CLI's API client answer every request with `body`."""

    def install(body: dict[str, Any]) -> None:
        original = cli.Api.__init__

        def init(self: cli.Api, settings: Any, url: str | None) -> None:
            original(self, settings, url)
            transport = httpx.MockTransport(lambda _request: httpx.Response(200, json=body))
            self.client = httpx.Client(base_url=self.base, transport=transport)

        monkeypatch.setattr(cli.Api, "__init__", init)

    return install


def preview(session_factory: SessionFactory, rule_id: str, count: int) -> dict[str, Any]:
    """The schedule endpoint's answer for a stored rule, as JSON."""
    with session_factory() as session:
        return schedule_preview(rule_id, session, count=count).model_dump(mode="json")


def test_a_trigger_that_cannot_fire_shows_its_problem(
    session_factory: SessionFactory, api_answers: Answer
) -> None:
    # Given a rule stored before validation refused its impossible cron, beside a good one
    store_rule(session_factory, IMPOSSIBLE)
    api_answers(preview(session_factory, "february-30", 2))

    # When its next fire times are asked for
    result = CliRunner().invoke(main, ["rules", "next", "february-30", "-n", "2"])

    # Then the bad trigger shows why it cannot fire, and the good one its times
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == "trigger #0: 0 0 30 2 * (UTC)"
    assert lines[1].startswith("  problem: triggers.0: cron '0 0 30 2 *' (UTC) never fires")
    assert lines[2] == "trigger #1: * * * * * (UTC)"
    assert len(lines) == 5 and all(line.endswith("Z") for line in lines[3:])


def test_a_rule_whose_document_cannot_be_read_shows_that_problem(
    session_factory: SessionFactory, api_answers: Answer
) -> None:
    # Given a stored document this version cannot read
    store_rule(session_factory, {"id": "unreadable", "triggers": "every day", "execution": {}})
    api_answers(preview(session_factory, "unreadable", 2))

    # When its next fire times are asked for
    result = CliRunner().invoke(main, ["rules", "next", "unreadable"])

    # Then it says so instead of claiming the rule has no schedule triggers
    assert result.exit_code == 0, result.output
    assert result.output.startswith("rule unreadable: problem: its stored document cannot be read")
    assert "no schedule triggers" not in result.output


def test_rules_next_from_a_time_marks_the_fires_dst_moved_or_doubled(
    session_factory: SessionFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a nightly 02:30 Berlin rule, and an API that answers from the request's parameters
    store_rule(
        session_factory,
        {
            "id": "nightly",
            "triggers": [
                {"type": "schedule", "cron": "30 2 * * *", "timezone": "Europe/Berlin"},
                {
                    "type": "schedule",
                    "cron": "15 * * * *",
                    "timezone": "Europe/Berlin",
                    "dst_repeat": "both",
                },
            ],
            "execution": IMPOSSIBLE["execution"],
        },
    )
    asked: list[str | None] = []

    def answer(request: httpx.Request) -> httpx.Response:
        start = request.url.params.get("from")
        asked.append(start)
        with session_factory() as session:
            body = schedule_preview(
                "nightly",
                session,
                count=int(request.url.params["count"]),
                start=datetime.fromisoformat(start) if start else None,
            )
        return httpx.Response(200, json=body.model_dump(mode="json"))

    original = cli.Api.__init__

    def init(self: cli.Api, settings: Any, url: str | None) -> None:
        original(self, settings, url)
        self.client = httpx.Client(base_url=self.base, transport=httpx.MockTransport(answer))

    monkeypatch.setattr(cli.Api, "__init__", init)

    # When its fires around the spring and the autumn changes are asked for
    spring = CliRunner().invoke(
        main, ["rules", "next", "nightly", "-n", "2", "--from", "2026-03-28T12:00:00Z"]
    )
    autumn = CliRunner().invoke(
        main, ["rules", "next", "nightly", "-n", "3", "--from", "2026-10-24T23:50:00Z"]
    )

    # Then the time went to the API, and the moved and doubled fires say so
    assert asked == ["2026-03-28T12:00:00Z", "2026-10-24T23:50:00Z"]
    assert spring.exit_code == 0, spring.output
    assert (
        "  2026-03-29 03:00 local   2026-03-29T01:00Z  moved: 02:30 does not exist that day "
        "(clocks jump to 03:00); dst_gap: shift"
    ) in spring.output.splitlines()
    assert autumn.exit_code == 0, autumn.output
    lines = autumn.output.splitlines()
    assert (
        "  2026-10-25 02:30 local   2026-10-25T00:30Z  02:30 happens twice (clocks go back); "
        "fires once, in the first pass" in lines
    )
    assert (
        "  2026-10-25 02:15 local   2026-10-25T01:15Z  doubled: 02:15 happens twice (clocks "
        "go back); second of 2 fires" in lines
    )


def test_a_from_without_a_zone_is_refused(session_factory: SessionFactory) -> None:
    store_rule(session_factory, IMPOSSIBLE)
    with session_factory() as session, pytest.raises(InvalidInputError, match="has no time zone"):
        schedule_preview("february-30", session, count=1, start=datetime(2026, 3, 29, 1, 0))
