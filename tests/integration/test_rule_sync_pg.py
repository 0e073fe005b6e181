"""Rule sync against PostgreSQL: new rules are written with COPY and the unchanged files of
a re-sync are skipped, with every row and history entry as a sync through SQLite writes it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import func, select

from ade_tasks.db.engine import SessionFactory, create_db_engine, create_session_factory
from ade_tasks.db.schema import RuleRow, RuleVersionRow
from ade_tasks.rule_files.sync import sync_rules_dir
from tests.conftest import write_rule

RULE = """
id: {id}
triggers: [{{type: manual}}]
execution: {{kind: built-in, actions: [{{type: run-command, command: "{command}"}}]}}
"""


@pytest.fixture
def factory(database_url: str) -> Iterator[SessionFactory]:
    engine = create_db_engine(database_url)
    yield create_session_factory(engine)
    engine.dispose()


def test_a_first_sync_and_an_edited_re_sync_write_rows_and_history(
    factory: SessionFactory, tmp_path: Path
) -> None:
    rules_dir = tmp_path / "rules"
    for name in ("a", "b", "c"):
        write_rule(rules_dir, f"{name}.yaml", RULE.format(id=name, command="true"))
    loaded, report = sync_rules_dir(factory, rules_dir)
    assert sorted(report.added) == ["a", "b", "c"] and not loaded.problems

    write_rule(rules_dir, "b.yaml", RULE.format(id="b", command="echo edited"))
    loaded, report = sync_rules_dir(factory, rules_dir)

    assert report.updated == ["b"] and sorted(report.unchanged) == ["a", "c"]
    assert {item.rule_id for item in loaded.rules if item.document is not None} == {"b"}
    with factory() as session:
        row = session.get(RuleRow, "b")
        assert row is not None and row.version == 2 and row.file_digest is not None
        assert row.document["execution"]["actions"][0]["command"] == "echo edited"
        assert row.created_at.tzinfo is not None
        history = session.execute(
            select(RuleVersionRow.rule_id, func.count())
            .group_by(RuleVersionRow.rule_id)
            .order_by(RuleVersionRow.rule_id)
        ).all()
        assert [tuple(entry) for entry in history] == [("a", 1), ("b", 2), ("c", 1)]
        first = session.scalars(
            select(RuleVersionRow.document).where(RuleVersionRow.rule_id == "a")
        ).one()
        assert first["id"] == "a"  # a JSON object, not a string of one


def test_a_removed_rule_synced_again_continues_its_history(
    factory: SessionFactory, tmp_path: Path
) -> None:
    # Given a rule synced, edited, removed (its history: created, updated, deleted)
    rules_dir = tmp_path / "rules"
    write_rule(rules_dir, "a.yaml", RULE.format(id="a", command="true"))
    write_rule(rules_dir, "keep.yaml", RULE.format(id="keep", command="true"))
    sync_rules_dir(factory, rules_dir)
    write_rule(rules_dir, "a.yaml", RULE.format(id="a", command="false"))
    sync_rules_dir(factory, rules_dir)
    (rules_dir / "a.yaml").unlink()
    assert sync_rules_dir(factory, rules_dir)[1].removed == ["a"]
    # When its file comes back
    write_rule(rules_dir, "a.yaml", RULE.format(id="a", command="true"))
    _, report = sync_rules_dir(factory, rules_dir)
    # Then it is added at the version after its history, which it keeps
    assert report.added == ["a"]
    with factory() as session:
        row = session.get(RuleRow, "a")
        assert row is not None and row.version == 4
        versions = session.execute(
            select(RuleVersionRow.version, RuleVersionRow.change)
            .where(RuleVersionRow.rule_id == "a")
            .order_by(RuleVersionRow.version)
        ).all()
    assert [tuple(v) for v in versions] == [
        (1, "created"), (2, "updated"), (3, "deleted"), (4, "created"),
    ]  # fmt: skip
