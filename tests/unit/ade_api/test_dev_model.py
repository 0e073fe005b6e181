"""`ade-tasks dev-model`'s scripts: what a script file says, the errors for a bad one, and the
default answer (`ade_api.dev_model`)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from ade_api.cli import main as cli
from ade_api.dev_model import ScriptAnswer, ScriptError, load_script

GOOD = """\
# try a read, then answer
turns:
  - tool: read_file
    input: {path: README.md}
  - text: "All done."
    tool: list_dir
  - text: "Bye."
"""
TOOLS = [{"name": "list_dir"}, {"name": "read_file"}]


def test_a_script_is_its_turns_in_order(tmp_path: Path) -> None:
    script = tmp_path / "turns.yaml"
    script.write_text(GOOD)
    turns = load_script(script)
    assert [[(b["type"], b.get("name"), b.get("input"), b.get("text")) for b in t.blocks]
            for t in turns] == [
        [("tool_use", "read_file", {"path": "README.md"}, None)],
        [("text", None, None, "All done."), ("tool_use", "list_dir", {}, None)],
        [("text", None, None, "Bye.")],
    ]  # fmt: skip
    assert [t.stop_reason for t in turns] == ["tool_use", "tool_use", "end_turn"]


@pytest.mark.parametrize(
    ("text", "wanted"),
    [
        ("turns:\n  - text: hi\n  - txt: bye\n", "turns.yaml:3: turn 2: unknown key 'txt'"),
        ("turns:\n  - input: {path: x}\n", "turns.yaml:2: turn 1: says neither `text` nor `tool`"),
        ("turns:\n  - tool: read_file\n    input: [x]\n", "turns.yaml:2: turn 1: `input` must be a mapping"),
        ("turns:\n  - text: [a]\n", "turns.yaml:2: turn 1: `text` must be a string"),
        ("turns:\n  - just text\n", "turns.yaml:2: turn 1: expected a mapping"),
        ("turns: []\n", "turns.yaml:1: expected a non-empty `turns:` list"),
        ("- text: hi\n", "turns.yaml:1: expected a non-empty `turns:` list"),
        ("turns:\n  - text: 'open\n", "turns.yaml:3: not YAML"),
    ],
)  # fmt: skip
def test_a_bad_script_names_the_file_line_and_what_to_write(
    tmp_path: Path, text: str, wanted: str
) -> None:
    script = tmp_path / "turns.yaml"
    script.write_text(text)
    with pytest.raises(ScriptError) as raised:
        load_script(script)
    assert str(raised.value).startswith(f"{tmp_path}/{wanted}"), raised.value


def test_the_command_refuses_a_bad_script_before_it_listens(tmp_path: Path) -> None:
    script = tmp_path / "turns.yaml"
    script.write_text("turns:\n  - txt: hi\n")
    result = CliRunner().invoke(cli, ["dev-model", "--script", str(script)])
    assert result.exit_code != 0
    assert f"{script}:2: turn 1: unknown key 'txt'" in result.output
    assert "`tool: NAME` and `input: {...}`" in result.output
    missing = CliRunner().invoke(cli, ["dev-model", "--script", str(tmp_path / "none.yaml")])
    assert missing.exit_code != 0 and "cannot read the script" in missing.output


def test_the_script_starts_afresh_in_every_conversation(tmp_path: Path) -> None:
    script = tmp_path / "turns.yaml"
    script.write_text(GOOD)
    answer = ScriptAnswer(load_script(script))
    first = {"tools": TOOLS, "messages": [{"role": "user", "content": "go"}]}
    later = {"tools": TOOLS, "messages": [
        {"role": "user", "content": "go"}, {"role": "assistant", "content": []},
        {"role": "user", "content": []}, {"role": "assistant", "content": []},
    ]}  # fmt: skip
    assert answer(first).blocks[0]["name"] == "read_file"
    assert answer(later).blocks[0]["text"] == "Bye."
    later["messages"] += [{"role": "user", "content": []}, {"role": "assistant", "content": []}]
    assert answer(later).blocks[0]["text"] == "The dev-model script has no more turns."


def test_the_default_looks_around_once_then_summarises_what_it_saw() -> None:
    answer = ScriptAnswer()
    call = answer({"tools": TOOLS, "messages": [{"role": "user", "content": "go"}]})
    assert call.blocks[0]["name"] == "list_dir" and call.blocks[0]["input"] == {"path": "."}
    result = {"type": "tool_result", "tool_use_id": "t1", "content": "README.md\nsrc/\n"}
    summary = answer({"tools": TOOLS, "messages": [
        {"role": "user", "content": "go"}, {"role": "assistant", "content": list(call.blocks)},
        {"role": "user", "content": [result]},
    ]})  # fmt: skip
    assert summary.stop_reason == "end_turn"
    assert (
        "not a model" in summary.blocks[0]["text"] and "README.md src/" in summary.blocks[0]["text"]
    )
    no_tools = answer({"tools": [{"name": "web_search"}], "messages": []})
    assert no_tools.stop_reason == "end_turn"
