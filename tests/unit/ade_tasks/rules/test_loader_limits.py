"""Documents too deep or too big to read: a rules file nested thousands of levels deep, a YAML
alias bomb, an oversized file or an unconvertible number is refused with the file and the
reason, and the other files still load; the JSON and YAML readers bound the depth."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from ade_api.cli import main
from ade_tasks.limits import (
    _NOT_PLAIN,
    MAX_DEPTH,
    MAX_YAML_NODES,
    DocumentLimitError,
    _BoundedLoader,
    _load_plain,
    load_yaml,
    loads_json,
)
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


def bounded_load(text: str) -> Any:
    """The document as the Python composer (the one that counts as it composes) reads it."""
    loader = _BoundedLoader(text, MAX_DEPTH, MAX_YAML_NODES)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


#: Texts with every kind of scalar PyYAML's safe loader resolves, flow and block collections,
#: multi-line strings, an explicit tag, a merge of an inline mapping and an empty document.
PLAIN_TEXTS = [
    GOOD,
    "a: 1\nb: 1.5\nc: true\nd: ~\ne: 2026-12-03\nf: 2026-12-03T10:00:00Z\ng: 0x1f\nh: '07'\n",
    "steps:\n  - run: |\n      echo one\n      echo two\n  - {x: [1, 2, {y: z}]}\n",
    "a: !!str 12\nb: >\n  folded\n  text\n",
    "base:\n  <<: {x: 1, y: 2}\n  y: 3\n",
    "",
    "# only a comment\n",
]


@pytest.mark.parametrize("text", PLAIN_TEXTS)
def test_a_document_without_aliases_reads_as_the_counting_composer_reads_it(text: str) -> None:
    assert load_yaml(text) == bounded_load(text) == yaml.safe_load(text)


def test_every_example_rule_file_reads_as_the_counting_composer_reads_it() -> None:
    files = sorted(Path("config").rglob("*.yaml"))
    assert files, "no example rule files found"
    for path in files:
        text = path.read_text()
        assert _load_plain(text, MAX_DEPTH, MAX_YAML_NODES) == bounded_load(text), path


@pytest.mark.parametrize(
    "text",
    [
        "base: &b {x: 1}\nrule: {<<: *b, y: 2}\n",  # an alias: may expand, counted by the composer
        "- &a [*a, *a]\n",  # a document that contains itself
        "a: [b\n",  # malformed: the counting composer's error, with its position
        deep_list(MAX_DEPTH + 1),  # too deep: its DocumentLimitError, with where
        "[" + "x, " * 30_000 + "]",  # larger than the plain path composes
    ],
)
def test_aliases_and_every_refusal_go_the_counting_composers_way(text: str) -> None:
    assert _load_plain(text, MAX_DEPTH, MAX_YAML_NODES) is _NOT_PLAIN


def test_the_plain_path_counts_nodes_as_the_counting_composer_does() -> None:
    assert _load_plain("[x, y]", MAX_DEPTH, max_nodes=3) == ["x", "y"]  # the list and two
    assert _load_plain("[x, y, z]", MAX_DEPTH, max_nodes=3) is _NOT_PLAIN
    with pytest.raises(DocumentLimitError, match="more than 3 nodes"):
        load_yaml("[x, y, z]", max_nodes=3)


def test_a_malformed_document_is_reported_where_it_breaks() -> None:
    with pytest.raises(yaml.MarkedYAMLError) as caught:
        load_yaml("rule:\n  id: x\n  triggers: [manual\n")
    assert caught.value.problem_mark is not None and caught.value.problem_mark.line == 3
    with pytest.raises(DocumentLimitError) as limit:
        load_yaml("a:\n  b: " + deep_list(MAX_DEPTH))
    assert limit.value.where is not None and limit.value.where.startswith("line 2")
    merged = load_yaml("base: &b {x: 1}\nrule: {<<: *b, y: 2}\n")
    assert merged["rule"] == {"x": 1, "y": 2}
