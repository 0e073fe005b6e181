"""Rules written through the API and the version history of every rule, on SQLite: versions for
file syncs and API writes alike, refusals that leave nothing changed, pagination, usage reports."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, text, update

from ade_tasks.db import rule_edits as rule_edits_db
from ade_tasks.db import rule_sync as rule_sync_db
from ade_tasks.db import rule_versions as rule_versions_db
from ade_tasks.db import rules as rules_db
from ade_tasks.db import usage as usage_db
from ade_tasks.db.engine import SessionFactory, create_db_engine, create_session_factory
from ade_tasks.db.migrate import upgrade
from ade_tasks.db.schema import RuleRow, RuleVersionRow, RunRow, RunStepRow
from ade_tasks.errors import ConflictError, InvalidInputError, NotFoundError
from ade_tasks.rule_files.sync import sync_rules_dir
from ade_tasks.rules.rule import Rule
from ade_tasks.runs.dispatch import dispatch
from ade_tasks.runs.trigger_events import TriggerEvent
from ade_tasks.states import RunStatus
from ade_tasks.testing import InMemorySender
from ade_workers.engine.runner import execute_run
from ade_workers.engine.runner_config import RunnerConfig
from tests.conftest import write_rule

FILE_RULE = """
id: {id}
triggers: [{{type: manual}}]
execution: {{kind: built-in, actions: [{{type: run-command, command: "{command}"}}]}}
"""


def api_rule(rule_id: str = "hello", command: str = "echo hi", **extra: Any) -> Rule:
    document = {
        "id": rule_id,
        "triggers": [{"type": "manual"}],
        "execution": {"kind": "built-in", "actions": [{"type": "run-command", "command": command}]},
        **extra,
    }
    return Rule.model_validate(document)


def history(session_factory: SessionFactory, rule_id: str) -> list[tuple[int, str, str, str]]:
    with session_factory() as session:
        rows, _ = rule_versions_db.list_versions(session, rule_id, limit=500)
        return [(r.version, r.change, r.source, r.changed_by) for r in reversed(rows)]


def row_of(session_factory: SessionFactory, rule_id: str) -> RuleRow | None:
    with session_factory() as session:
        row = session.get(RuleRow, rule_id)
        if row is not None:
            session.expunge(row)
        return row


def sync(session_factory: SessionFactory, rules_dir: Path) -> rule_sync_db.SyncReport:
    loaded, report = sync_rules_dir(session_factory, rules_dir)
    assert not loaded.problems, loaded.problems
    return report


def test_a_file_rule_gets_a_version_for_each_sync_that_adds_changes_or_removes_it(
    session_factory: SessionFactory, rules_dir: Path
) -> None:
    write_rule(rules_dir, "a.yaml", FILE_RULE.format(id="alpha", command="true"))
    write_rule(rules_dir, "keep.yaml", FILE_RULE.format(id="keep", command="true"))
    sync(session_factory, rules_dir)
    sync(session_factory, rules_dir)  # unchanged: no new version
    write_rule(rules_dir, "a.yaml", FILE_RULE.format(id="alpha", command="false"))
    sync(session_factory, rules_dir)
    (rules_dir / "a.yaml").unlink()
    assert sync(session_factory, rules_dir).removed == ["alpha"]
    write_rule(rules_dir, "a.yaml", FILE_RULE.format(id="alpha", command="true"))
    sync(session_factory, rules_dir)

    assert history(session_factory, "alpha") == [
        (1, "created", "file", "rules sync"),
        (2, "updated", "file", "rules sync"),
        (3, "deleted", "file", "rules sync"),
        (4, "created", "file", "rules sync"),
    ]
    row = row_of(session_factory, "alpha")
    assert row is not None and row.version == 4  # the id's versions never repeat
    with session_factory() as session:
        first, _ = rule_versions_db.list_versions(session, "alpha", limit=500)
    assert first[-1].document["execution"]["actions"][0]["command"] == "true"
    assert first[-2].document["execution"]["actions"][0]["command"] == "false"
    assert history(session_factory, "keep") == [(1, "created", "file", "rules sync")]


def test_an_api_rule_is_created_updated_and_deleted_with_its_history_kept(
    session_factory: SessionFactory,
) -> None:
    with session_factory.begin() as session:
        row = rule_edits_db.create_rule(session, api_rule(), "alice")
        assert (row.version, row.source, row.trust_state, row.enabled) == (
            1,
            "api",
            "trusted",
            True,
        )
    with session_factory.begin() as session:
        row, changed = rule_edits_db.update_rule(
            session, "hello", api_rule(command="echo v2"), "bob"
        )
        assert changed and row.version == 2
    with session_factory.begin() as session:  # the same document again changes nothing
        row, changed = rule_edits_db.update_rule(
            session, "hello", api_rule(command="echo v2"), "bob"
        )
        assert not changed and row.version == 2
    with session_factory.begin() as session:
        assert rule_edits_db.delete_rule(session, "hello", "carol") == 3

    assert row_of(session_factory, "hello") is None
    assert history(session_factory, "hello") == [
        (1, "created", "api", "alice"),
        (2, "updated", "api", "bob"),
        (3, "deleted", "api", "carol"),
    ]
    with session_factory.begin() as session:  # re-created: the versions go on
        assert rule_edits_db.create_rule(session, api_rule(), "alice").version == 4


def test_creating_a_taken_id_is_refused(session_factory: SessionFactory, rules_dir: Path) -> None:
    write_rule(rules_dir, "a.yaml", FILE_RULE.format(id="alpha", command="true"))
    sync(session_factory, rules_dir)
    with session_factory.begin() as session:
        rule_edits_db.create_rule(session, api_rule(), "alice")

    for rule_id, where in (("alpha", "from the rules file"), ("hello", "from the API")):
        with pytest.raises(ConflictError, match=f"rule '{rule_id}' already exists \\({where}"):
            with session_factory.begin() as session:
                rule_edits_db.create_rule(session, api_rule(rule_id), "mallory")
    row = row_of(session_factory, "alpha")
    assert row is not None and row.source == "file"
    assert len(history(session_factory, "hello")) == 1


def test_file_rules_are_not_changed_or_deleted_through_the_api_but_may_be_switched(
    session_factory: SessionFactory, rules_dir: Path
) -> None:
    write_rule(rules_dir, "a.yaml", FILE_RULE.format(id="alpha", command="true"))
    sync(session_factory, rules_dir)

    with pytest.raises(ConflictError, match="edit or remove the rule in its file"):
        with session_factory.begin() as session:
            rule_edits_db.update_rule(session, "alpha", api_rule("alpha", "rm -rf /"), "mallory")
    with pytest.raises(ConflictError, match="does not delete it"):
        with session_factory.begin() as session:
            rule_edits_db.delete_rule(session, "alpha", "mallory")
    with session_factory.begin() as session:
        row, changed = rule_edits_db.set_enabled(session, "alpha", False)
        assert changed and row.version == 1  # a switch, not a version

    row = row_of(session_factory, "alpha")
    assert row is not None and row.enabled is False
    assert row.document["execution"]["actions"][0]["command"] == "true"
    assert history(session_factory, "alpha") == [(1, "created", "file", "rules sync")]
    write_rule(rules_dir, "a.yaml", FILE_RULE.format(id="alpha", command="echo edited"))
    sync(session_factory, rules_dir)  # the file's `enabled` applies again once it changes
    row = row_of(session_factory, "alpha")
    assert row is not None and row.enabled is True and row.version == 2


def test_an_update_keeps_the_enabled_state_unless_the_document_says(
    session_factory: SessionFactory,
) -> None:
    with session_factory.begin() as session:
        rule_edits_db.create_rule(session, api_rule(), "alice")
        rule_edits_db.set_enabled(session, "hello", False)
    with session_factory.begin() as session:
        row, _ = rule_edits_db.update_rule(
            session, "hello", api_rule(command="echo 2"), "bob", keep_enabled=True
        )
        assert row.enabled is False and row.document["enabled"] is False
    with session_factory.begin() as session:
        row, _ = rule_edits_db.update_rule(
            session, "hello", api_rule(command="echo 2", enabled=True), "bob"
        )
        assert row.enabled is True


def test_an_update_of_another_id_or_an_unknown_rule_is_refused(
    session_factory: SessionFactory,
) -> None:
    with session_factory.begin() as session:
        rule_edits_db.create_rule(session, api_rule(), "alice")
    with pytest.raises(InvalidInputError, match="is not the rule being updated"):
        with session_factory.begin() as session:
            rule_edits_db.update_rule(session, "hello", api_rule("other"), "bob")
    for call in (
        lambda s: rule_edits_db.update_rule(s, "nope", api_rule("nope"), "bob"),
        lambda s: rule_edits_db.delete_rule(s, "nope", "bob"),
        lambda s: rule_edits_db.set_enabled(s, "nope", True),
        lambda s: rule_versions_db.list_versions(s, "nope"),
    ):
        with pytest.raises(NotFoundError, match="rule 'nope' does not exist"):
            with session_factory.begin() as session:
                call(session)
    assert history(session_factory, "hello") == [(1, "created", "api", "alice")]


def test_a_rule_with_an_unfinished_run_is_not_deleted(
    session_factory: SessionFactory,
) -> None:
    with session_factory.begin() as session:
        rule_edits_db.create_rule(session, api_rule(), "alice")
    run_id = dispatch(session_factory, InMemorySender(), "hello", TriggerEvent.manual()).run.id

    with pytest.raises(ConflictError, match=f"unfinished runs \\({run_id}\\)"):
        with session_factory.begin() as session:
            rule_edits_db.delete_rule(session, "hello", "bob")
    assert row_of(session_factory, "hello") is not None

    with session_factory.begin() as session:
        session.execute(update(RunRow).values(status=RunStatus.SUCCEEDED))
    with session_factory.begin() as session:
        rule_edits_db.delete_rule(session, "hello", "bob")
    with session_factory() as session:  # its runs stay
        assert session.scalar(select(RunRow.rule_id).where(RunRow.id == run_id)) == "hello"
    with pytest.raises(NotFoundError):
        dispatch(session_factory, InMemorySender(), "hello", TriggerEvent.manual())


def test_versions_and_rules_are_paged_with_opaque_cursors(
    session_factory: SessionFactory,
) -> None:
    with session_factory.begin() as session:
        for name in ("a", "b", "c", "d", "e"):
            rule_edits_db.create_rule(session, api_rule(name), "alice")
        for n in range(2, 6):
            rule_edits_db.update_rule(session, "a", api_rule("a", f"echo {n}"), "alice")

    with session_factory() as session:
        seen, cursor = [], None
        while True:
            page, cursor = rule_versions_db.list_versions(session, "a", limit=2, cursor=cursor)
            seen += [row.version for row in page]
            if cursor is None:
                break
        assert seen == [5, 4, 3, 2, 1]
        ids, cursor = [], None
        while True:
            rows, cursor = rules_db.list_rules_page(session, limit=2, cursor=cursor)
            ids += [row.id for row in rows]
            if cursor is None:
                break
        assert ids == ["a", "b", "c", "d", "e"]
        for bad in ("???", "x"):
            with pytest.raises(InvalidInputError, match="is not valid"):
                rule_versions_db.list_versions(session, "a", cursor=bad)
        with pytest.raises(InvalidInputError, match="is not valid"):
            rules_db.list_rules_page(session, limit=2, cursor="%%%")


def test_usage_lists_rows_newest_first_with_totals_over_every_page(
    session_factory: SessionFactory,
) -> None:
    with session_factory.begin() as session:
        for day, code, seconds, tokens, cost in (
            ("2026-11-01", "team-a", 10.0, 100, 0.5),
            ("2026-11-01", "team-b", 1.0, 0, 0.0),
            ("2026-11-02", "team-a", 20.0, 200, 1.25),
            ("2026-11-03", "team-a", 5.0, 50, 0.25),
        ):
            usage_db.add_usage(
                session, code, day, run_seconds=seconds, tokens=tokens, cost_usd=cost
            )
    everything = usage_db.UsageFilter()
    team_a = usage_db.UsageFilter("team-a", since="2026-11-01", until="2026-11-02")
    with session_factory() as session:
        rows, cursor = usage_db.list_usage(session, everything, limit=3)
        assert [(r.day, r.billing_code) for r in rows] == [
            ("2026-11-03", "team-a"),
            ("2026-11-02", "team-a"),
            ("2026-11-01", "team-a"),
        ]
        rest, last = usage_db.list_usage(session, everything, limit=3, cursor=cursor)
        assert [(r.day, r.billing_code) for r in rest] == [("2026-11-01", "team-b")]
        assert last is None
        assert usage_db.usage_totals(session, everything) == usage_db.Usage(36.0, 350, 2.0)
        rows, _ = usage_db.list_usage(session, team_a)
        assert [r.day for r in rows] == ["2026-11-02", "2026-11-01"]
        assert usage_db.usage_totals(session, team_a) == usage_db.Usage(30.0, 300, 1.75)
        with pytest.raises(InvalidInputError, match="is not valid"):
            usage_db.list_usage(session, everything, cursor="bm9waXBl")


def test_migration_0010_starts_the_history_of_existing_rules(tmp_path: Path) -> None:
    engine = create_db_engine(f"sqlite:///{tmp_path / 'old.db'}")
    upgrade(engine, "0009")
    with engine.begin() as connection:
        connection.execute(
            text(
                "INSERT INTO rules (id, version, source, source_file, content_hash, enabled, "
                "document, trust_state, created_at, updated_at) VALUES ('old', 3, 'file', "
                "'rules/old.yaml', 'abc', 1, '{\"id\": \"old\"}', 'trusted', "
                "'2026-01-01 00:00:00', '2026-01-02 00:00:00')"
            )
        )
    upgrade(engine)

    with create_session_factory(engine)() as session:
        (row,) = session.scalars(select(RuleVersionRow)).all()
    assert (row.rule_id, row.version, row.change, row.source) == ("old", 3, "created", "file")
    assert row.document == {"id": "old"} and row.changed_by == "migration 0010"


def test_an_api_created_rule_may_not_call_an_admin_only_ade_action(
    session_factory: SessionFactory, rules_dir: Path, config: RunnerConfig
) -> None:
    write_rule(rules_dir, "nightly.yaml", FILE_RULE.format(id="nightly", command="true"))
    sync(session_factory, rules_dir)
    ops = Rule.model_validate(
        {
            "id": "ops",
            "triggers": [{"type": "manual"}],
            "execution": {
                "kind": "built-in",
                "actions": [
                    {
                        "id": "disable",
                        "type": "ade-action",
                        "action": "rules.disable",
                        "args": {"rule_id": "nightly"},
                    }
                ],
            },
        }
    )
    with session_factory.begin() as session:
        rule_edits_db.create_rule(session, ops, "alice")

    run_id = dispatch(session_factory, InMemorySender(), "ops", TriggerEvent.manual()).run.id
    status = execute_run(session_factory, config, run_id, "w1")

    assert status == RunStatus.FAILED
    with session_factory() as session:
        step = session.scalars(select(RunStepRow).where(RunStepRow.run_id == run_id)).one()
        nightly = session.get(RuleRow, "nightly")
        assert nightly is not None and nightly.enabled
    assert step.error is not None and "its source is 'api'" in step.error
