"""A sync skips parsing the files whose bytes did not change since the rules table last saw
them, and still sees every edit, rename, deletion and change made to the rows meanwhile."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from sqlalchemy import delete, select

from ade_tasks.db.engine import SessionFactory
from ade_tasks.db.rule_sync import SyncReport
from ade_tasks.db.schema import RuleRow
from ade_tasks.rule_files.sync import sync_rules_dir
from ade_tasks.rules import file_digests
from ade_tasks.rules.loader import LoadResult
from tests.conftest import write_rule

RULE = """
id: {id}
triggers: [{{type: manual}}]
execution: {{kind: built-in, actions: [{{type: run-command, command: "{command}"}}]}}
"""


def sync(session_factory: SessionFactory, rules_dir: Path) -> tuple[LoadResult, SyncReport]:
    return sync_rules_dir(session_factory, rules_dir)


def parsed_ids(loaded: LoadResult) -> set[str]:
    """The rules whose files were parsed (a skipped file's rules carry no document)."""
    return {item.rule_id for item in loaded.rules if item.document is not None}


def test_an_unchanged_file_is_not_parsed_again_and_its_rule_is_unchanged(
    session_factory: SessionFactory, rules_dir: Path
) -> None:
    write_rule(rules_dir, "a.yaml", RULE.format(id="a", command="true"))
    write_rule(rules_dir, "b.yaml", RULE.format(id="b", command="true"))
    sync(session_factory, rules_dir)

    loaded, report = sync(session_factory, rules_dir)

    assert parsed_ids(loaded) == set()
    assert sorted(report.unchanged) == ["a", "b"] and not report.updated and not report.removed
    assert sorted(item.rule.id for item in loaded.rules) == ["a", "b"]  # parsed on demand


def test_an_edit_that_keeps_the_size_and_the_mtime_is_seen(
    session_factory: SessionFactory, rules_dir: Path
) -> None:
    path = write_rule(rules_dir, "a.yaml", RULE.format(id="a", command="true"))
    sync(session_factory, rules_dir)
    stat = path.stat()

    write_rule(rules_dir, "a.yaml", RULE.format(id="a", command="echo"))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert path.stat().st_mtime_ns == stat.st_mtime_ns and path.stat().st_size == stat.st_size
    loaded, report = sync(session_factory, rules_dir)

    assert report.updated == ["a"] and parsed_ids(loaded) == {"a"}
    with session_factory() as session:
        row = session.get(RuleRow, "a")
        assert row is not None and row.version == 2
        assert row.document["execution"]["actions"][0]["command"] == "echo"


def test_a_renamed_file_moves_its_rule_and_a_deleted_file_removes_it(
    session_factory: SessionFactory, rules_dir: Path
) -> None:
    write_rule(rules_dir, "a.yaml", RULE.format(id="a", command="true"))
    b = write_rule(rules_dir, "b.yaml", RULE.format(id="b", command="true"))
    sync(session_factory, rules_dir)

    (rules_dir / "a.yaml").rename(rules_dir / "renamed.yaml")
    b.unlink()
    loaded, report = sync(session_factory, rules_dir)

    assert report.updated == ["a"] and report.removed == ["b"] and not loaded.problems
    with session_factory() as session:
        row = session.get(RuleRow, "a")
        assert row is not None and row.source_file == str(rules_dir / "renamed.yaml")
        assert session.get(RuleRow, "b") is None


def test_a_row_removed_behind_the_sync_s_back_is_written_again(
    session_factory: SessionFactory, rules_dir: Path
) -> None:
    write_rule(
        rules_dir,
        "two.yaml",
        """
        - {id: a, triggers: [{type: manual}], execution: {kind: built-in, actions: [{type: run-command, command: "true"}]}}
        - {id: b, triggers: [{type: manual}], execution: {kind: built-in, actions: [{type: run-command, command: "true"}]}}
        """,
    )
    sync(session_factory, rules_dir)
    with session_factory.begin() as session:
        session.execute(delete(RuleRow).where(RuleRow.id == "b"))

    loaded, report = sync(session_factory, rules_dir)

    assert report.added == ["b"] and report.unchanged == ["a"]
    assert parsed_ids(loaded) == {"a", "b"}  # the file's rows no longer match: parsed again


def test_a_file_with_a_problem_reports_it_on_every_sync(
    session_factory: SessionFactory, rules_dir: Path
) -> None:
    write_rule(rules_dir, "a.yaml", RULE.format(id="a", command="true"))
    write_rule(rules_dir, "b.yaml", RULE.format(id="a", command="true"))  # a duplicate id
    write_rule(rules_dir, "c.yaml", "id: c\ntriggers: []\n")
    for _ in range(2):
        loaded, report = sync(session_factory, rules_dir)
        assert sorted((Path(p.file).name, p.field) for p in loaded.problems) == [
            ("b.yaml", "id"),
            ("c.yaml", "execution"),
            ("c.yaml", "triggers"),
        ]
        assert not report.removed


def test_another_parser_parses_every_file_again(
    session_factory: SessionFactory, rules_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_rule(rules_dir, "a.yaml", RULE.format(id="a", command="true"))
    sync(session_factory, rules_dir)

    monkeypatch.setattr(file_digests, "parser_fingerprint", lambda: b"another release")
    loaded, report = sync(session_factory, rules_dir)

    assert parsed_ids(loaded) == {"a"} and report.unchanged == ["a"]
    assert parsed_ids(sync(session_factory, rules_dir)[0]) == set()  # its new digest stored


def test_a_one_shot_rule_is_parsed_on_every_sync(
    session_factory: SessionFactory, rules_dir: Path
) -> None:
    write_rule(
        rules_dir,
        "once.yaml",
        """
        id: once
        triggers: [{type: schedule, run_at: "2099-01-01T00:00:00Z"}]
        execution: {kind: built-in, actions: [{type: run-command, command: "true"}]}
        """,
    )
    sync(session_factory, rules_dir)

    loaded, _ = sync(session_factory, rules_dir)

    assert parsed_ids(loaded) == {"once"}  # refused once its time is past, so never skipped
    with session_factory() as session:
        assert session.scalar(select(RuleRow.file_digest).where(RuleRow.id == "once")) is None
