"""Dispatch of a rule this process has read before: one statement per trigger, and a rule that
changed since (edited, disabled, paused, deleted) is judged by its row as it is now."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event

from ade_tasks.db import pauses as pauses_db
from ade_tasks.db import rule_edits as rule_edits_db
from ade_tasks.db import runs as runs_db
from ade_tasks.db.engine import SessionFactory
from ade_tasks.errors import AdmissionError, NotFoundError
from ade_tasks.runs.dispatch import dispatch
from ade_tasks.runs.trigger_events import TriggerEvent
from ade_tasks.testing import InMemorySender
from tests.unit.conftest import add_rule

RULE = """
    id: seen
    enabled: {enabled}
    triggers: [{{type: manual}}, {{type: webhook, hook: ci}}]
    execution:
      kind: built-in
      queue: {queue}
      actions: [{{type: run-command, command: "true"}}]
"""
EVENT = TriggerEvent("webhook", "ci ping", trigger_indexes=(1,))


@pytest.fixture
def fired(session_factory: SessionFactory, sender: InMemorySender, rules_dir: Path) -> Path:
    """The rule `seen`, dispatched once by this process (so it has read it)."""
    add_rule(session_factory, rules_dir, "seen", RULE.format(enabled="true", queue="first.q"))
    assert dispatch(session_factory, sender, "seen", EVENT).sent
    return rules_dir


@contextmanager
def statements(session_factory: SessionFactory) -> Iterator[list[str]]:
    """The SQL statements executed on the factory's engine meanwhile (without SQLite's
    `BEGIN IMMEDIATE`, which PostgreSQL's autocommit sessions do not send)."""
    seen: list[str] = []
    engine = session_factory.kw["bind"]

    def record(_conn: Any, _cursor: Any, sql: str, *_args: Any) -> None:
        if not sql.startswith("BEGIN"):
            seen.append(sql)

    event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", record)


def test_a_rule_fired_before_costs_one_statement_per_trigger(
    session_factory: SessionFactory, sender: InMemorySender, fired: Path
) -> None:
    with statements(session_factory) as executed:
        result = dispatch(session_factory, sender, "seen", EVENT)
        manual = dispatch(session_factory, sender, "seen", TriggerEvent.manual(by="op"))
    assert result.created and result.sent and manual.created and manual.sent
    assert len(executed) == 2, executed
    assert all(sql.lstrip().startswith("INSERT INTO runs") for sql in executed)


def test_an_edit_since_the_last_trigger_is_what_the_next_run_records(
    session_factory: SessionFactory, sender: InMemorySender, fired: Path
) -> None:
    add_rule(session_factory, fired, "seen", RULE.format(enabled="true", queue="second.q"))
    result = dispatch(session_factory, sender, "seen", EVENT)
    assert result.created and sender.sent[-1] == (result.run.id, "second.q", "seen")
    with session_factory() as session:
        assert runs_db.get_run(session, result.run.id).rule_version == 2


def test_a_rule_disabled_since_refuses_its_events_and_still_runs_manually(
    session_factory: SessionFactory, sender: InMemorySender, fired: Path
) -> None:
    with session_factory.begin() as session:
        rule_edits_db.set_enabled(session, "seen", False)
    with pytest.raises(AdmissionError, match="rule 'seen' is disabled"):
        dispatch(session_factory, sender, "seen", EVENT)
    assert dispatch(session_factory, sender, "seen", TriggerEvent.manual()).created


def test_a_rule_paused_since_refuses_its_events_with_the_note(
    session_factory: SessionFactory, sender: InMemorySender, fired: Path
) -> None:
    with session_factory.begin() as session:
        pauses_db.pause(session, "seen", None, "deploy freeze", "ops")
    with pytest.raises(AdmissionError, match="deploy freeze"):
        dispatch(session_factory, sender, "seen", EVENT)
    assert len(sender.sent) == 1  # the fixture's run only


def test_a_rule_deleted_since_is_not_found(
    session_factory: SessionFactory, sender: InMemorySender, fired: Path
) -> None:
    (fired / "seen.yaml").unlink()
    add_rule(session_factory, fired, "other", RULE.replace("id: seen", "id: other").format(
        enabled="true", queue="q"))  # fmt: skip
    with pytest.raises(NotFoundError, match="rule 'seen' does not exist"):
        dispatch(session_factory, sender, "seen", EVENT)
