"""Rule files parsed in worker processes give what parsing them here gives, problems named by
their file included; a pool that breaks loses no file."""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path

import pytest

from ade_tasks.rules import file_pool, loader
from ade_tasks.rules.loader import load_rules_dir
from tests.conftest import write_rule

RULE = """
id: {id}
triggers: [{{type: manual}}]
execution: {{kind: built-in, actions: [{{type: run-command, command: "true"}}]}}
"""


def test_the_pool_loads_what_one_process_loads_and_names_the_failing_files(
    rules_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(file_pool, "usable_cores", lambda: 2)  # a pool even on one core
    for index in range(6):
        write_rule(rules_dir, f"r{index}.yaml", RULE.format(id=f"r{index}"))
    write_rule(rules_dir, "z-dup.yaml", RULE.format(id="r1"))
    write_rule(rules_dir, "malformed.yaml", "id: [unclosed\n")
    write_rule(rules_dir, "wrong.yaml", "id: wrong\ntriggers: []\n")
    (rules_dir / "binary.yaml").write_bytes(b"\xff\xfe")

    alone = load_rules_dir(rules_dir)
    pooled = load_rules_dir(rules_dir, pool_from=1)

    assert [(i.rule_id, i.content_hash, i.file_digest) for i in pooled.rules] == [
        (i.rule_id, i.content_hash, i.file_digest) for i in alone.rules
    ]
    assert [str(p) for p in pooled.problems] == [str(p) for p in alone.problems]
    assert sorted({Path(p.file).name for p in pooled.problems}) == [
        "binary.yaml",
        "malformed.yaml",
        "wrong.yaml",
        "z-dup.yaml",
    ]
    assert pooled.files == alone.files == 10
    assert pooled.rules[0].rule.id == "r0"  # the model, from the worker's document
    # the documents come back whole (as their JSON text, decoded here)
    assert [i.document for i in pooled.rules] == [i.document for i in alone.rules]
    assert all(isinstance(i.document, dict) and i.document_json for i in pooled.rules)


def test_a_file_that_breaks_the_parser_is_a_problem_naming_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(*_args: object, **_kwargs: object) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(loader, "parse_rule", broken)

    rules, problems = loader.parse_in_worker((b"id: x\n", "rules/x.yaml", False, b"key"))

    assert rules == []
    assert [str(p) for p in problems] == [
        "rules/x.yaml:(file): could not be loaded (RuntimeError: a bug); fix or remove the file"
    ]


def _exit_in_a_worker(item: str) -> str:
    if multiprocessing.parent_process() is not None:
        os._exit(3)  # a worker killed (out of memory, a crash in a C extension)
    return item.upper()


def test_a_pool_that_breaks_parses_its_items_here(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(file_pool, "usable_cores", lambda: 2)

    results = file_pool.map_in_pool(_exit_in_a_worker, ["a", "b", "c"], pool_from=1)

    assert results == ["A", "B", "C"]


def test_few_files_are_parsed_in_this_process() -> None:
    assert file_pool.map_in_pool(_exit_in_a_worker, ["a"], pool_from=2) == ["A"]


def test_rule_files_are_found_as_rglob_finds_them(rules_dir: Path) -> None:
    # Given rule files at the top, in sub-folders and shared/, a file and a folder reached by
    # symlinks, a broken link, a folder named like a rule file and files of other kinds
    write_rule(rules_dir, "b.yaml", RULE.format(id="b"))
    write_rule(rules_dir, "a.yml", RULE.format(id="a"))
    (rules_dir / "team" / "deep").mkdir(parents=True)
    write_rule(rules_dir / "team" / "deep", "c.yaml", RULE.format(id="c"))
    (rules_dir / "shared").mkdir()
    write_rule(rules_dir / "shared", "s.yaml", RULE.format(id="s"))
    (rules_dir / "linked.yaml").symlink_to(rules_dir / "b.yaml")
    (rules_dir / "team-link").symlink_to(rules_dir / "team")
    (rules_dir / "broken.yaml").symlink_to(rules_dir / "missing.yaml")
    (rules_dir / "folder.yaml").mkdir()
    (rules_dir / "notes.txt").write_text("not a rule")
    (rules_dir / ".yaml").write_text("a dotfile without a suffix")
    # When they are listed
    found = loader.rule_files(rules_dir)
    # Then they are what Path.rglob would give, in path order, shared/ marked
    expected = sorted(
        (p for p in rules_dir.rglob("*") if p.suffix in loader.RULE_SUFFIXES and p.is_file()),
        key=lambda path: path.parts,
    )
    assert [path for path, _ in found] == [str(path) for path in expected]
    assert [Path(path).relative_to(rules_dir).as_posix() for path, shared in found if shared] == [
        "shared/s.yaml"
    ]
    assert {Path(path).name for path, _ in found} == {
        "a.yml", "b.yaml", "c.yaml", "s.yaml", "linked.yaml"
    }  # fmt: skip


def test_a_file_a_worker_cannot_read_is_a_problem_naming_it(
    rules_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(file_pool, "usable_cores", lambda: 2)
    write_rule(rules_dir, "good.yaml", RULE.format(id="good"))
    (rules_dir / "huge.yaml").write_text("# padding\n" * 200_000)  # over 1 MiB
    pooled = load_rules_dir(rules_dir, pool_from=1)
    assert [item.rule_id for item in pooled.rules] == ["good"]
    (problem,) = pooled.problems
    assert problem.file.endswith("huge.yaml") and "1 MiB" in problem.reason
