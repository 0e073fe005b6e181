"""How the CLI shows a step's live output: `runs logs` joins the live part and the rest of the
stored output without repeating or losing text; `run --wait` prints whole lines."""

from __future__ import annotations

from ade_api.cli.logs import stored_rest
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
    lines = live.finished(FINISHED)
    assert "live output stops at 2 characters" in lines[1] and lines[2:] == [
        "      | l1",
        "      | l2",
    ]
