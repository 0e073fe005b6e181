"""How the CLI shows a step's live output: `runs logs` joins the live part and the rest of the
stored output without repeating or losing text; `run --wait` prints whole lines."""

from __future__ import annotations

from typing import Any, cast

import pytest

from ade_api.cli.logs import LogPrinter, stored_rest
from ade_api.cli.root import Api
from ade_api.cli.step_lines import LiveLines
from ade_workers.containment.process import CappedOutput

FINISHED = {"index": 0, "step_id": "t", "action_type": "run-command", "status": "succeeded",
            "exit_code": 0, "output_tail": "l1\nl2"}  # fmt: skip


def capped(text: str, cap: int) -> str:
    out = CappedOutput(cap)
    out.write(text)
    return out.text()


def test_the_rest_of_a_whole_record_follows_the_live_part_exactly() -> None:
    stored = capped("abcdefghij", 100)
    assert stored_rest(stored, 0) == "abcdefghij"  # it never streamed
    assert stored_rest(stored, 4) == "efghij"
    assert stored_rest(stored, 10) == ""


def test_the_rest_of_a_capped_record_counts_its_omission_from_the_live_part() -> None:
    text = "".join(chr(ord("a") + n % 26) for n in range(100))
    stored = capped(text, 20)  # head 10, tail 10, 80 omitted
    assert stored_rest(stored, 0) == stored
    assert stored_rest(stored, 5) == stored[5:]  # the rest of the head, the mark, the tail
    assert stored_rest(stored, 20) == "\n[... 70 characters omitted ...]\n" + text[90:]
    assert stored_rest(stored, 95) == text[95:]  # the live part reached into the tail


def test_a_line_that_only_looks_like_the_mark_is_output() -> None:
    stored = "x\n[... 3 characters omitted ...]\nyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy"
    assert stored_rest(stored, 1) == stored[1:]


def test_run_wait_prints_live_lines_whole_and_no_tail_after_them() -> None:
    live = LiveLines()
    assert live.feed(0, {"offset": 0, "text": "one\ntw"}) == ["      | one"]
    assert live.feed(0, {"offset": 6, "text": "o\nthr"}) == ["      | two"]
    assert live.finished(FINISHED) == [
        "      | thr",
        "  step 1 t (run-command) succeeded, exit 0",
    ]


def test_run_wait_shows_the_tail_of_a_step_that_did_not_stream_or_hit_the_cap() -> None:
    assert LiveLines().finished(FINISHED)[1:] == ["      | l1", "      | l2"]
    live = LiveLines()
    live.feed(0, {"offset": 0, "text": "x\n", "capped": 2})
    assert live.finished(FINISHED)[1:] == [
        "      | [... its last lines:]",
        "      | l1",
        "      | l2",
    ]


def test_run_wait_says_at_the_cap_that_the_live_output_stops_there() -> None:
    live = LiveLines()
    assert live.feed(0, {"offset": 0, "text": "one\ntw"}) == ["      | one"]
    assert live.feed(0, {"offset": 6, "text": "o\nthr", "capped": 11}) == [
        "      | two",
        "      | thr",  # the held line: nothing more of it comes live
        "      | [... live output stops at 11 characters; its last lines show when it ends]",
    ]
    assert live.finished(FINISHED)[0] == "  step 1 t (run-command) succeeded, exit 0"


class StoredRun:
    """The API as `runs logs` asks it for a step's stored output when the step ends."""

    def __init__(self, output: str) -> None:
        self.output = output

    def call(self, _method: str, _path: str, **_kwargs: Any) -> dict[str, Any]:
        return {"steps": [{"index": 0, "output": self.output}]}


def test_runs_logs_says_at_the_cap_that_the_live_output_stops_there(
    capsys: pytest.CaptureFixture[str],
) -> None:
    text = "x" * 10 + "y" * 10 + "z" * 80
    printer = LogPrinter(cast(Api, StoredRun(capped(text, 20))), "run-1")

    printer.event("step.output", {"step_index": 0, "data": {"offset": 0, "text": text[:10]}})
    printer.event(
        "step.output", {"step_index": 0, "data": {"offset": 10, "text": text[10:20], "capped": 20}}
    )
    live = capsys.readouterr().out
    printer.event("step.finished", {"data": FINISHED})
    ended = capsys.readouterr().out

    assert live == (
        text[:20] + "\n[... live output stops at 20 characters; the whole output's head and "
        "tail show when the step ends]\n"
    )
    assert ended == (
        "\n[... 70 characters omitted ...]\n" + text[90:] + "\n"
        "<== step 1 t (run-command) succeeded, exit 0\n"
    )
