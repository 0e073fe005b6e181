"""`ade-tasks events list|show` against the API in process on SQLite: an event's verdicts as
the CLI prints them (which filter refused it and what it saw), and the bad inputs each said
so, with the exit code the CLI's other commands use."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient

from ade_api.cli import main
from ade_api.cli.root import Api
from ade_api.http.app import create_app
from ade_tasks.access.roles import Role
from ade_tasks.db import tokens as tokens_db
from ade_tasks.db.engine import SessionFactory
from ade_tasks.settings import Settings
from ade_tasks.testing import InMemorySender
from ade_tasks.triggers.ingress_events import match_ingress_event
from ade_workers.celery.app import create_celery_app
from tests.unit.ade_tasks.triggers.test_ingress_events import rule, store_pr
from tests.unit.conftest import add_rule


@pytest.fixture
def api(
    session_factory: SessionFactory, sender: InMemorySender, monkeypatch: pytest.MonkeyPatch
) -> Iterator[TestClient]:
    settings = Settings()
    app = create_app(
        settings,
        session_factory=session_factory,
        celery=create_celery_app(settings, session_factory=session_factory),
        sender=sender,
    )
    with session_factory.begin() as session:
        _, secret = tokens_db.create_token(session, "ops", Role.VIEWER, "test")
    with TestClient(app, headers={"Authorization": f"Bearer {secret}"}) as client:

        def init(self: Api, settings: Any, url: str | None) -> None:
            self.base, self.client, self._sends_token = "http://testserver", client, False
            self._token_file = Path(".ade/api-token")

        monkeypatch.setattr(Api, "__init__", init)
        yield client


@pytest.fixture
def refused_event(session_factory: SessionFactory, sender: InMemorySender, rules_dir: Path) -> int:
    trigger = "{type: github.pr_opened, labels: [agent-fix]}"
    add_rule(session_factory, rules_dir, "fix", rule("agent-fix", trigger))
    event_id = store_pr(session_factory, sender, "no-label")
    match_ingress_event(session_factory, sender, event_id)
    return event_id


def cli(*argv: str) -> Any:
    return CliRunner().invoke(main, list(argv))


def test_show_prints_each_rules_verdict_with_the_filter_and_what_it_saw(
    api: TestClient, refused_event: int
) -> None:
    shown = cli("events", "show", str(refused_event))

    assert shown.exit_code == 0, shown.output
    assert "runs: (none)" in shown.output
    assert (
        "    agent-fix                trigger #0  refused by labels: missing label(s) agent-fix"
        in shown.output.splitlines()
    )
    as_json = json.loads(cli("events", "show", str(refused_event), "--json").output)
    assert as_json["matching"]["rules"][0]["filter"] == "labels"


def test_list_shows_the_verdict_counts_and_filters_by_source_status_and_since(
    api: TestClient, refused_event: int
) -> None:
    listed = cli("events", "list", "--source", "github", "--status", "dispatched",
                 "--since", "2000-01-01T00:00Z")  # fmt: skip
    later = cli("events", "list", "--since", "2999-01-01T00:00+00:00")

    assert listed.exit_code == 0, listed.output
    (header, row) = listed.output.splitlines()
    assert header.split()[:3] == ["ID", "RECEIVED", "(UTC)"]
    assert row.split()[0] == str(refused_event) and row.endswith("refused 1")
    assert later.output == "(no events)\n"


def test_an_unknown_event_is_said_so_and_fails(api: TestClient) -> None:
    shown = cli("events", "show", "4242")

    assert shown.exit_code == 1
    assert "answered 404: no ingress event 4242" in shown.output


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--source", "gitlab"], "'gitlab' is no event source; use one of file, git, github"),
        (["--status", "done"], "'done' is not one of 'received', 'dispatched', 'failed'"),
        (["--since", "yesterday"], "'yesterday' is no ISO 8601 time"),
        (["--since", "2026-12-01T09:00"], "has no time zone; add one"),
        (["--limit", "0"], "0 is not in the range 1<=x<=500"),
    ],
)
def test_bad_list_filters_are_refused_before_the_api_is_asked(
    api: TestClient, argv: list[str], said: str
) -> None:
    result = cli("events", "list", *argv)

    assert result.exit_code == 2 and said in result.output


def test_the_api_refuses_a_bad_source_and_a_time_without_a_zone(api: TestClient) -> None:
    source = api.get("/api/v1/ingress/events", params={"source": "gitlab"})
    naive = api.get("/api/v1/ingress/events", params={"since": "2026-12-01T09:00:00"})

    assert source.status_code == 422 and "no event source" in source.json()["detail"]
    assert naive.status_code == 422 and "has no time zone" in naive.json()["detail"]
