"""Documents too deep or too big to read: a rules file nested thousands of levels deep, a YAML
alias bomb, an oversized file or an unconvertible number is refused with the file and the
reason, and the other files still load; the JSON and YAML readers bound the depth."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from ade_api.cli import main
from ade_tasks.limits import MAX_DEPTH, DocumentLimitError, load_yaml, loads_json
from ade_tasks.rules.loader import load_rules_dir
from tests.conftest import write_rule

GOOD = """
    id: good
    triggers: [{type: manual}]
    execution:
      kind: built-in
      actions: [{type: run-command, command: "true"}]
"""


def deep_list(depth: int) -> str:
    return "[" * depth + "]" * depth


def test_a_deep_yaml_file_is_reported_and_the_other_files_still_load(tmp_path: Path) -> None:
    write_rule(tmp_path, "a-good.yaml", GOOD)
    (tmp_path / "b-deep.yaml").write_text(deep_list(3000))
    write_rule(tmp_path, "c-good.yaml", GOOD.replace("id: good", "id: other"))
    result = load_rules_dir(tmp_path)
    assert [r.rule.id for r in result.rules] == ["good", "other"]
    (problem,) = result.problems
    assert problem.file.endswith("b-deep.yaml")
    assert f"nested deeper than {MAX_DEPTH} levels" in problem.reason


def test_a_yaml_alias_bomb_is_refused_without_expanding_it(tmp_path: Path) -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{n}: &a{n} [" + ", ".join([f"*a{n - 1}"] * 10) + "]" for n in range(1, 10)]
    (tmp_path / "bomb.yaml").write_text("\n".join(lines) + "\n")
    (problem,) = load_rules_dir(tmp_path).problems
    assert problem.file.endswith("bomb.yaml") and "nodes" in problem.reason


def test_an_oversized_rules_file_is_refused_with_what_to_do(tmp_path: Path) -> None:
    (tmp_path / "huge.yaml").write_text("# padding\n" * 200_000)
    (problem,) = load_rules_dir(tmp_path).problems
    assert problem.file.endswith("huge.yaml") and "split it" in problem.reason


def test_a_number_too_long_to_convert_is_a_file_problem_not_a_crash(tmp_path: Path) -> None:
    write_rule(tmp_path, "big.yaml", GOOD + "    retry: " + "9" * 5000 + "\n")
    (problem,) = load_rules_dir(tmp_path).problems
    assert problem.file.endswith("big.yaml")


def test_cli_validate_reports_the_deep_file_and_counts_the_good_one(tmp_path: Path) -> None:
    write_rule(tmp_path, "good.yaml", GOOD)
    (tmp_path / "deep.yaml").write_text(deep_list(3000))
    result = CliRunner().invoke(main, ["rules", "validate", str(tmp_path)])
    assert result.exit_code == 1, result.output
    assert "deep.yaml:" in result.output and "nested deeper than" in result.output
    assert "1 valid rule in 2 files" in result.output


def test_json_and_yaml_readers_bound_the_depth() -> None:
    assert loads_json(deep_list(MAX_DEPTH)) is not None
    assert load_yaml(deep_list(MAX_DEPTH)) is not None
    for reader in (loads_json, load_yaml):
        for depth in (MAX_DEPTH + 1, 5000):
            with pytest.raises(DocumentLimitError, match="nested deeper than"):
                reader(deep_list(depth))
    with pytest.raises(DocumentLimitError):
        loads_json(json.dumps({"a": [{"b": [[[]]]}]}).encode(), max_depth=4)
    assert isinstance(DocumentLimitError("x"), ValueError)  # webhook parsing expects ValueError


def test_a_yaml_document_that_contains_itself_is_refused_not_walked_forever() -> None:
    # Walking `&a [*a, *a]` level by level doubles the nodes at each level: 2**64 at MAX_DEPTH.
    for text in ("- &a [*a, *a]\n", "a: &a {b: *a, c: *a}\n"):
        with pytest.raises(DocumentLimitError, match="contains itself"):
            load_yaml(text)
