"""The event-matching index on SQLite: right after every write of a rule (sync, push, API
create, update and delete, a sync's removal), unchanged by disabling, filled by migration 0026
from the documents stored before it, and declared consistently by the trigger kinds."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import insert, select

from ade_tasks.clock import utcnow
from ade_tasks.db import rule_edits
from ade_tasks.db.engine import SessionFactory, create_db_engine, create_session_factory
from ade_tasks.db.migrate import upgrade
from ade_tasks.db.rule_index import trigger_keys
from ade_tasks.db.rule_index_tables import RuleTriggerKeyRow
from ade_tasks.db.schema import RuleRow
from ade_tasks.rule_files.push import PushedFile, load_pushed, push_rules
from ade_tasks.rule_files.sync import sync_rules_dir
from ade_tasks.rules import triggers as trigger_models
from ade_tasks.rules.rule import Rule
from ade_tasks.triggers.registry import KINDS, event_keys
from tests.conftest import write_rule

BUILT_IN = "execution: {kind: built-in, actions: [{type: run-command, command: 'true'}]}"
Keys = set[tuple[str, str, str]]


def rule_text(rule_id: str, triggers: str) -> str:
    return f"id: {rule_id}\ntriggers: [{triggers}]\n{BUILT_IN}\n"


def index_of(session_factory: SessionFactory) -> Keys:
    with session_factory() as session:
        rows = session.execute(
            select(
                RuleTriggerKeyRow.rule_id,
                RuleTriggerKeyRow.trigger_type,
                RuleTriggerKeyRow.match_key,
            )
        )
        return {tuple(row) for row in rows}  # type: ignore[misc]


def api_rule(rule_id: str, hook: str) -> Rule:
    return Rule.model_validate(
        {
            "id": rule_id,
            "triggers": [{"type": "webhook", "hook": hook}],
            "execution": {
                "kind": "built-in",
                "actions": [{"type": "run-command", "command": "true"}],
            },
        }
    )


def test_trigger_keys_narrow_by_each_kinds_field_and_widen_for_globs_and_absent_values() -> None:
    document = {
        "triggers": [
            {"type": "webhook", "hook": "Deploy"},
            {"type": "git.pr_opened", "repo": "Acme/App"},  # an alias of github.pr_opened
            {"type": "github.push"},
            {"type": "run.finished", "rule": ["build", "fix-*"]},
            {"type": "run.finished", "rule": "lint"},
            {"type": "schedule", "cron": "* * * * *"},
            {"type": "some.future.kind", "hook": "x"},
            "not a trigger",
        ]
    }

    assert trigger_keys(document) == {
        ("webhook", "deploy"),
        ("github.pr_opened", "acme/app"),
        ("github.push", "*"),
        ("run.finished", "*"),
        ("run.finished", "lint"),
        ("schedule", "*"),
        ("some.future.kind", "*"),
    }
    assert trigger_keys({"triggers": "not a list"}) == set()


def test_every_kind_that_narrows_declares_both_sides() -> None:
    """A model's `index_field` and its kind's `event_keys` come together: one without the other
    would index rules under keys no event carries (or the reverse)."""
    for declared in KINDS:
        assert (declared.model.index_field is None) == (declared.event_keys is None), declared
    assert event_keys("webhook:deploy", ["webhook"], {}) == {"deploy"}
    assert event_keys("github", ["github.push", "github.event"], {"repo": "a/b"}) == {"a/b"}
    assert event_keys("lane", ["lane.created"], {"project": "p"}) == frozenset()


def test_a_sync_writes_changes_and_removes_the_keys_of_its_rules(
    session_factory: SessionFactory, rules_dir: Path
) -> None:
    write_rule(rules_dir, "a.yaml", rule_text("a", "{type: webhook, hook: ci}"))
    write_rule(rules_dir, "b.yaml", rule_text("b", "{type: github.pr_opened, repo: acme/app}"))
    sync_rules_dir(session_factory, rules_dir)
    assert index_of(session_factory) == {
        ("a", "webhook", "ci"),
        ("b", "github.pr_opened", "acme/app"),
    }

    write_rule(rules_dir, "a.yaml", rule_text("a", "{type: webhook, hook: release}"))
    (rules_dir / "b.yaml").unlink()
    _, report = sync_rules_dir(session_factory, rules_dir)

    assert (report.updated, report.removed) == (["a"], ["b"])
    assert index_of(session_factory) == {("a", "webhook", "release")}


def test_a_push_writes_the_keys_of_the_rules_it_applies(session_factory: SessionFactory) -> None:
    files = {"a.yaml": rule_text("a", "{type: webhook, hook: ci}")}
    loaded = load_pushed([PushedFile(p, t) for p, t in files.items()], "config/rules")
    with session_factory.begin() as session:
        push_rules(session, loaded.rules, base=None, dry_run=False, by="ci")

    assert index_of(session_factory) == {("a", "webhook", "ci")}


def test_api_edits_keep_the_keys_and_disabling_writes_none(
    session_factory: SessionFactory,
) -> None:
    with session_factory.begin() as session:
        rule_edits.create_rule(session, api_rule("mine", "ci"), "me")
    assert index_of(session_factory) == {("mine", "webhook", "ci")}

    with session_factory.begin() as session:
        rule_edits.update_rule(session, "mine", api_rule("mine", "deploy"), "me")
    assert index_of(session_factory) == {("mine", "webhook", "deploy")}

    with session_factory.begin() as session:
        rule_edits.set_enabled(session, "mine", False)
    assert index_of(session_factory) == {("mine", "webhook", "deploy")}

    with session_factory.begin() as session:
        rule_edits.delete_rule(session, "mine", "me")
    assert index_of(session_factory) == set()


def test_migration_0026_indexes_the_rules_stored_before_it(tmp_path: Path) -> None:
    engine = create_db_engine(f"sqlite:///{tmp_path / 'ade.db'}")
    upgrade(engine, "0025")
    now = utcnow()
    with engine.begin() as connection:
        for rule_id, trigger in [
            ("hooked", {"type": "webhook", "hook": "ci"}),
            ("nightly", {"type": "schedule", "cron": "0 3 * * *"}),
        ]:
            connection.execute(
                insert(RuleRow.__table__).values(
                    id=rule_id,
                    version=1,
                    source="api",
                    content_hash=rule_id,
                    enabled=True,
                    document={"id": rule_id, "triggers": [trigger]},
                    trust_state="trusted",
                    created_at=now,
                    updated_at=now,
                )
            )

    upgrade(engine)

    assert index_of(create_session_factory(engine)) == {
        ("hooked", "webhook", "ci"),
        ("nightly", "schedule", "*"),
    }


@pytest.mark.parametrize("field", ["hook", "repo", "rule"])
def test_the_fields_indexed_are_fields_of_their_models(field: str) -> None:
    models = [m for m in trigger_models.TRIGGER_MODELS if m.index_field == field]
    assert models and all(field in model.model_fields for model in models)
