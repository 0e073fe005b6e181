"""A pushed rules directory on SQLite: validated as a sync validates one (every problem, nothing
applied), compared as a diff, applied as one versioned change, refused when its base is stale."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import select

from ade_tasks.db import rule_edits as rule_edits_db
from ade_tasks.db import rule_sync as rule_sync_db
from ade_tasks.db.engine import SessionFactory
from ade_tasks.db.schema import RuleRow, RuleVersionRow
from ade_tasks.errors import ConflictError
from ade_tasks.rule_files.push import PushedFile, PushPlan, load_pushed, push_rules
from ade_tasks.rule_files.sync import sync_rules_dir
from ade_tasks.rules.loader import load_rules_dir
from ade_tasks.rules.rule import Rule
from tests.conftest import write_rule


def rule(rule_id: str, command: str = "echo hi") -> str:
    return (
        f"id: {rule_id}\ntriggers: [{{type: manual}}]\n"
        f"execution: {{kind: built-in, actions: [{{type: run-command, command: '{command}'}}]}}\n"
    )


def push(
    session_factory: SessionFactory,
    files: dict[str, str],
    *,
    base: str | None = None,
    dry_run: bool = False,
) -> PushPlan:
    loaded = load_pushed([PushedFile(p, t) for p, t in files.items()], "config/rules")
    assert not loaded.problems, loaded.problems
    with session_factory.begin() as session:
        return push_rules(session, loaded.rules, base=base, dry_run=dry_run, by="ci (main)")


def stored(session_factory: SessionFactory) -> dict[str, tuple[int, str | None]]:
    with session_factory() as session:
        rows = session.execute(select(RuleRow.id, RuleRow.version, RuleRow.source_file))
        return {rule_id: (version, source) for rule_id, version, source in rows}


def test_every_problem_of_every_file_is_listed_with_its_file() -> None:
    # Given a directory with two good files, a bad rule, malformed YAML, a duplicate id and
    # paths no directory holds
    files = [
        PushedFile("good.yaml", rule("good")),
        PushedFile("team/other.yml", rule("other")),
        PushedFile("bad.yaml", rule("bad").replace("run-command", "run-comand")),
        PushedFile("broken.yaml", "id: [unclosed\n"),
        PushedFile("twice.yaml", rule("good")),
        PushedFile("../escape.yaml", rule("escape")),
        PushedFile("notes.txt", "hello"),
    ]
    # When it is loaded
    result = load_pushed(files, "config/rules")
    # Then each problem names its file (under the directory's name) and what to do
    problems = {(p.file, p.field): p.reason for p in result.problems}
    assert set(problems) == {
        ("config/rules/bad.yaml", "execution.actions.0"),
        ("config/rules/broken.yaml", "line 2, column 1"),
        ("config/rules/twice.yaml", "id"),
        ("config/rules/../escape.yaml", "(file)"),
        ("config/rules/notes.txt", "(file)"),
    }, result.problems
    assert "duplicate rule id 'good'" in problems[("config/rules/twice.yaml", "id")]
    assert "relative" in problems[("config/rules/../escape.yaml", "(file)")]
    assert [r.rule_id for r in result.rules] == ["good", "other"]


def test_the_same_directory_validates_as_a_sync_validates_it(tmp_path: Path) -> None:
    # Given a directory on disk with a bad file and a shared file
    directory = tmp_path / "rules"
    write_rule(directory, "a.yaml", rule("a"))
    write_rule(directory, "b.yaml", rule("b").replace("manual", "manul"))
    write_rule(directory / "shared", "s.yaml", rule("s"))
    on_disk = load_rules_dir(directory)
    # When the same files are pushed under the same directory name
    files = [
        PushedFile(Path(name).relative_to(directory).as_posix(), Path(name).read_text())
        for name in sorted(str(p) for p in directory.rglob("*.yaml"))
    ]
    pushed = load_pushed(files, str(directory))
    # Then the rules, their names, shared hashes and problems are the same
    assert [str(p) for p in pushed.problems] == [str(p) for p in on_disk.problems]
    assert [(r.rule_id, r.source_file, r.content_hash, r.file_hash) for r in pushed.rules] == [
        (r.rule_id, r.source_file, r.content_hash, r.file_hash) for r in on_disk.rules
    ]
    assert pushed.rules[-1].file_hash is not None  # shared config, trusted by hash as ever


def test_an_empty_push_is_refused_rather_than_removing_every_rule() -> None:
    result = load_pushed([], "config/rules")
    assert [p.field for p in result.problems] == ["(directory)"]
    assert "no rules files were pushed" in result.problems[0].reason


def test_a_dry_run_diffs_and_a_push_applies_one_versioned_change(
    session_factory: SessionFactory, tmp_path: Path
) -> None:
    # Given file rules synced from a directory
    directory = tmp_path / "config" / "rules"
    write_rule(directory, "keep.yaml", rule("keep"))
    write_rule(directory, "change.yaml", rule("change", "echo 1"))
    write_rule(directory, "drop.yaml", rule("drop"))
    sync_rules_dir(session_factory, directory)
    before = stored(session_factory)
    files = {"keep.yaml": rule("keep"), "change.yaml": rule("change", "echo 2")}
    files["new.yaml"] = rule("new")
    # When the same names are pushed with one rule changed, one added and one gone, as a dry run
    with session_factory() as session:
        base = rule_sync_db.file_rules_revision(session)
    label = str(directory)
    loaded = load_pushed([PushedFile(p, t) for p, t in files.items()], label)
    with session_factory.begin() as session:
        plan = push_rules(session, loaded.rules, base=base, dry_run=True, by="ci")
    # Then it says what would change, with a diff of the changed rule, and changes nothing
    assert (plan.added, plan.updated, plan.removed, plan.unchanged) == (
        ["new"],
        ["change"],
        ["drop"],
        ["keep"],
    )
    assert "-    command: echo 1\n+    command: echo 2\n" in plan.diffs["change"]
    assert (plan.applied, plan.base, plan.revision) == (False, base, base)
    assert stored(session_factory) == before
    # When it is pushed from that base
    with session_factory.begin() as session:
        done = push_rules(session, loaded.rules, base=base, dry_run=False, by="ci (main)")
    # Then the file rules match the directory, each change a version by the pusher
    assert done.applied and done.revision != base
    after = stored(session_factory)
    assert after == {
        "keep": before["keep"],
        "change": (before["change"][0] + 1, f"{label}/change.yaml"),
        "new": (1, f"{label}/new.yaml"),
    }
    with session_factory() as session:
        changes = session.execute(
            select(RuleVersionRow.rule_id, RuleVersionRow.change).where(
                RuleVersionRow.changed_by == "ci (main)"
            )
        ).all()
    assert sorted(changes) == [("change", "updated"), ("drop", "deleted"), ("new", "created")]


def test_a_push_from_a_stale_base_is_refused_and_changes_nothing(
    session_factory: SessionFactory,
) -> None:
    # Given two pushes that compared against the same state
    push(session_factory, {"a.yaml": rule("a")})
    with session_factory() as session:
        base = rule_sync_db.file_rules_revision(session)
    # When the first is applied
    first = push(session_factory, {"a.yaml": rule("a", "echo first")}, base=base)
    assert first.applied
    # Then the second is refused: it says what happened and to run it again
    with pytest.raises(ConflictError, match=r"changed since revision .*Run `ade-tasks rules push`"):
        push(session_factory, {"b.yaml": rule("b")}, base=base)
    assert set(stored(session_factory)) == {"a"}
    # And run again from the new state, it applies
    again = push(session_factory, {"b.yaml": rule("b")}, base=first.revision)
    assert (again.added, again.removed) == (["b"], ["a"])


def test_rules_created_through_the_api_are_kept(session_factory: SessionFactory) -> None:
    with session_factory.begin() as session:
        document = load_pushed([PushedFile("x.yaml", rule("by-api"))]).rules[0].stored()[0]
        rule_edits_db.create_rule(session, Rule.model_validate(document), "tests")
    plan = push(session_factory, {"a.yaml": rule("a")})
    assert plan.removed == [] and set(stored(session_factory)) == {"a", "by-api"}
