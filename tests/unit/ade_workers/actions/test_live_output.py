"""A step's live output: batched per step, capped like its stored output, masked across writes,
and never a reason for the step to fail."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from ade_tasks.secrets import Masker
from ade_workers.actions.live_output import BATCH_SECONDS, LiveOutput
from ade_workers.containment.process import run_process

ENV = {"PATH": os.environ["PATH"]}


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def recorder() -> tuple[list[dict[str, Any]], Any]:
    events: list[dict[str, Any]] = []
    return events, events.append


def test_text_waits_for_its_batch_then_goes_in_one_event() -> None:
    events, write = recorder()
    clock = Clock()
    live = LiveOutput(write, cap=1000, clock=clock)
    live.feed("one\n")
    live.feed("two\n")
    assert events == []  # within the batch
    clock.now += BATCH_SECONDS
    live.tick()
    assert events == [{"offset": 0, "text": "one\ntwo\n"}]
    live.feed("three\n")  # the next batch is not due yet
    live.tick()
    assert len(events) == 1
    clock.now += BATCH_SECONDS
    live.feed("four\n")  # a feed writes a due batch itself
    assert events[1] == {"offset": 8, "text": "three\nfour\n"}


def test_a_step_that_ends_within_its_first_batch_writes_nothing() -> None:
    events, write = recorder()
    live = LiveOutput(write, cap=1000, clock=Clock())
    live.feed("quick\n")
    live.finish()
    assert events == []  # its record carries the output: no statement more


def test_a_step_that_streamed_writes_the_rest_when_it_ends() -> None:
    events, write = recorder()
    clock = Clock()
    live = LiveOutput(write, cap=1000, clock=clock)
    live.feed("a\n")
    clock.now += BATCH_SECONDS
    live.tick()
    live.feed("b\n")
    live.finish()
    assert "".join(e["text"] for e in events) == "a\nb\n"
    assert [e["offset"] for e in events] == [0, 2]


def test_the_live_output_stops_at_the_cap_and_says_so_once() -> None:
    events, write = recorder()
    clock = Clock()
    live = LiveOutput(write, cap=10, clock=clock)
    for _ in range(1000):
        live.feed("0123456789abcdef")
        clock.now += BATCH_SECONDS
    live.finish()
    assert events == [{"offset": 0, "text": "0123456789", "capped": 10}]


def test_a_failed_write_keeps_the_text_for_the_next_batch() -> None:
    events: list[dict[str, Any]] = []
    failing = [True]

    def write(data: dict[str, Any]) -> None:
        if failing[0]:
            raise OSError("database is down")
        events.append(data)

    clock = Clock()
    live = LiveOutput(write, cap=1000, clock=clock)
    live.feed("kept\n")
    clock.now += BATCH_SECONDS
    live.tick()  # fails: logged, nothing raised
    failing[0] = False
    clock.now += BATCH_SECONDS
    live.feed("more\n")
    assert events == [{"offset": 0, "text": "kept\nmore\n"}]


def test_a_secret_split_across_two_writes_is_masked_in_the_live_output(tmp_path: Path) -> None:
    events, write = recorder()
    live = LiveOutput(write, cap=10_000)
    script = (
        "import sys, time\n"
        "sys.stdout.write('token=hunter'); sys.stdout.flush(); time.sleep(1.2)\n"
        "sys.stdout.write('2secret done\\n'); sys.stdout.flush(); time.sleep(1.2)\n"
    )
    result = run_process(
        [sys.executable, "-c", script], cwd=tmp_path, env=ENV, timeout=20,
        masker=Masker(["hunter2secret"]), on_output=live.feed, on_tick=live.tick,
    )  # fmt: skip
    live.finish()
    streamed = "".join(event["text"] for event in events)
    assert len(events) >= 2  # it was streamed while the command ran
    assert "hunter" not in streamed and streamed == "token=*** done\n" == result.output


def test_a_command_that_never_stops_printing_still_times_out(tmp_path: Path) -> None:
    ticks: list[int] = []
    result = run_process(
        ["sh", "-c", "yes"], cwd=tmp_path, env=ENV, timeout=1.0, on_tick=lambda: ticks.append(1)
    )
    assert result.timed_out and result.duration < 10
    assert ticks  # the caller's tick came between reads of an endless stream
