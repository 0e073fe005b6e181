"""`ade-tasks rules next` against an in-memory API that answers what the schedule endpoint computes
on SQLite: a trigger that cannot fire shows its problem, not an empty list of times."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

from ade_api.cli import base as cli
from ade_api.cli import main
from ade_api.http.routes.rule_schedule import schedule_preview
from ade_tasks.db.engine import SessionFactory
from tests.unit.test_schedule_boundaries import IMPOSSIBLE, store_rule

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
