"""The run follow stream's pieces without a server: synthesized step events, the end of a
stream, heartbeats and disconnects, and the CLI's Server-Sent Events parser."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from typing import Any

import pytest

from ade_api.cli import run_stream
from ade_api.cli import runs as cli_runs
from ade_api.http import follow
from ade_tasks.db import run_events as run_events_db
from ade_tasks.db import run_views as run_views_db

AT = datetime(2026, 1, 1, tzinfo=UTC)


def progress(
    status: str, steps: list[tuple[int, str]], events: int = 0, truncated: bool = False
) -> run_views_db.Progress:
    return run_views_db.Progress(
        {"r": run_views_db.RunState("r", status, "w1", None, None)},
        [
            run_views_db.StepState("r", i, f"s{i}", "run-command", st, 0, None, AT, AT)
            for i, st in steps
        ],
        [
            run_events_db.EventLine(n, "r", AT, "test.line", None, {"n": n})
            for n in range(1, events + 1)
        ],
        truncated,
    )


def kinds(feed: Any) -> list[str]:
    return [m.kind for m in feed.messages]


def test_steps_are_synthesized_once_and_the_stream_ends_after_the_final_status() -> None:
    feed = follow._Feed("r")
    none = follow._StepExtras()
    follow.FollowHub._apply(feed, progress("running", [(0, "running")], events=2), none)
    assert kinds(feed) == ["run.status", "step.started", "test.line", "test.line"]
    assert feed.cursor == 2 and feed.messages[2].text.startswith("id: 1\nevent: test.line\n")
    follow.FollowHub._apply(feed, progress("running", [(0, "running")]), none)
    assert len(feed.messages) == 4  # nothing new, nothing sent
    tails = follow._StepExtras({("r", 0): "done", ("r", 1): "quick"})
    follow.FollowHub._apply(feed, progress("running", [(0, "succeeded"), (1, "failed")]), tails)
    assert kinds(feed)[4:] == ["step.finished", "step.started", "step.finished"]
    body = json.loads(feed.messages[-1].text.split("data: ", 1)[1])
    assert body["data"]["status"] == "failed" and body["data"]["output_tail"] == "quick"
    follow.FollowHub._apply(
        feed, progress("failed", [(0, "succeeded"), (1, "failed")], 1, True), none
    )
    # more events to read: the final status waits for them
    assert not feed.done and kinds(feed)[-1] == "test.line"
    follow.FollowHub._apply(feed, progress("failed", [(0, "succeeded"), (1, "failed")]), none)
    assert feed.done and kinds(feed)[-2:] == ["run.status", "end"]


def test_reconnecting_after_an_event_id_skips_what_was_sent() -> None:
    real = follow._Message(5, 4, "x", "")
    synthetic_before, synthetic_after = (
        follow._Message(None, 3, "s", ""),
        follow._Message(None, 5, "s", ""),
    )
    assert real.visible_after(0) and real.visible_after(4) and not real.visible_after(5)
    assert not synthetic_before.visible_after(5) and synthetic_after.visible_after(5)


class FakeRequest:
    def __init__(self, connected_for: int) -> None:
        self.checks = 0
        self.connected_for = connected_for

    async def is_disconnected(self) -> bool:
        self.checks += 1
        return self.checks > self.connected_for


class FakeHub:
    def __init__(self) -> None:
        self.feed = follow._Feed("r")
        self.left = 0

    def join(self, run_id: str) -> Any:
        return self.feed

    def leave(self, feed: Any) -> None:
        self.left += 1


def test_an_idle_stream_sends_heartbeats_and_stops_when_the_client_leaves(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(follow, "HEARTBEAT_SECONDS", 0.05)
    monkeypatch.setattr(follow, "DISCONNECT_CHECK_SECONDS", 0.02)
    hub = FakeHub()

    async def collect() -> list[str]:
        stream = follow.follow_run(FakeRequest(connected_for=10), hub, "r", 0)  # type: ignore[arg-type]
        return [chunk async for chunk in stream]

    chunks = asyncio.run(asyncio.wait_for(collect(), 5))
    assert chunks[0].startswith("retry: 2000")
    assert ": keep-alive\n\n" in chunks
    assert hub.left == 1


def test_the_cli_parses_server_sent_events() -> None:
    lines = ["retry: 2000", ": hello", "", "id: 3", "event: test.line", 'data: {"id": 3}', "",
             "event: end", 'data: {"data": {"status": "succeeded"}}', ""]  # fmt: skip
    parsed = list(run_stream._parse(iter(lines)))
    assert parsed == [
        ("keep-alive", {}),
        ("test.line", {"id": 3}),
        ("end", {"data": {"status": "succeeded"}}),
    ]
    assert cli_runs.step_line(
        "step.finished",
        {"index": 0, "step_id": "a", "action_type": "run-command", "status": "failed",
         "exit_code": 2, "error": "boom", "output_tail": "x"},
    ) == ["  step 1 a (run-command) failed, exit 2: boom", "      | x"]  # fmt: skip
