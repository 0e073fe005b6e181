"""What the CLI prints, without a server: the follow stream in the order things happened, the
reason a step was skipped, a cancelled step shown as cancelled, `-` for missing values, the
runs table, `-h` on every command, `--version`, and one-line errors for run ids that cannot be
one (refused before any request)."""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime, timedelta
from typing import Any

import click
import pytest
from click.testing import CliRunner

from ade_api.cli import history as cli_history
from ade_api.cli import root as cli
from ade_api.cli import run_stream
from ade_api.cli import runs as cli_runs
from ade_api.http import follow
from ade_tasks.db import run_events as run_events_db
from ade_tasks.db import run_views as run_views_db
from tests.support import BIN

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def step(index: int, status: str, start: float, end: float | None, error: str | None = None
         ) -> run_views_db.StepState:  # fmt: skip
    return run_views_db.StepState("r", index, f"s{index + 1}", "run-command", status, None, error,
                             at(start), None if end is None else at(end))  # fmt: skip


def state(status: str, error: str | None = None, end: float | None = None) -> run_views_db.RunState:
    return run_views_db.RunState("r", status, "w1", error, None if end is None else at(end))


def sent(feed: follow._Feed) -> list[tuple[str, dict[str, Any]]]:
    bodies = [json.loads(m.text.split("data: ", 1)[1]) for m in feed.messages]
    return [(body["kind"], body["data"]) for body in bodies]


def test_one_ticks_steps_and_events_are_sent_in_the_order_they_happened() -> None:
    # Given a tick that sees a run end: its second step read before its first, an event
    # written between them
    feed = follow._Feed("r")
    progress = run_views_db.Progress(
        {"r": state("failed", "step 's2' failed", end=3)},
        [step(1, "failed", 1.5, 2.5), step(0, "succeeded", 0, 1)],
        [run_events_db.EventLine(7, "r", at(1.2), "test.line", None, {})],
        False,
    )
    # When the hub applies it
    follow.FollowHub._apply(feed, progress, follow._StepExtras())
    # Then steps, event and final status come in the order they happened, the status last
    kinds = [(kind, data.get("index")) for kind, data in sent(feed)]
    assert kinds == [("step.started", 0), ("step.finished", 0), ("test.line", None),
                     ("step.started", 1), ("step.finished", 1), ("run.status", None),
                     ("end", None)]  # fmt: skip
    assert feed.cursor == 7 and feed.done


def test_a_skipped_step_is_sent_once_with_its_reason_and_never_as_started() -> None:
    feed = follow._Feed("r")
    progress = run_views_db.Progress({"r": state("running")}, [step(0, "skipped", 0, 0)], [], False)
    extras = follow._StepExtras(skip_reasons={("r", 0): "condition is false"})
    follow.FollowHub._apply(feed, progress, extras)
    assert [kind for kind, _ in sent(feed)] == ["run.status", "step.finished"]
    data = sent(feed)[-1][1]
    assert cli_runs.step_line("step.finished", data) == [
        "  step 1 s1 (run-command) skipped: condition is false"
    ]


def test_a_step_the_cancel_ended_is_sent_as_cancelled_and_an_earlier_failure_stays() -> None:
    # Given a cancelled run whose first step failed on its own (continue_on_failure) and whose
    # second was running when the operator cancelled
    feed = follow._Feed("r")
    reason = "cancelled by ops: wrong branch"
    progress = run_views_db.Progress(
        {"r": state("cancelled", reason, end=5)},
        [step(0, "failed", 0, 1, "command exited with status 1"), step(1, "failed", 1, 5, reason)],
        [],
        False,
    )
    follow.FollowHub._apply(feed, progress, follow._StepExtras())
    finished = [data for kind, data in sent(feed) if kind == "step.finished"]
    assert [data["status"] for data in finished] == ["failed", "cancelled"]
    assert cli_runs.step_line("step.finished", finished[1]) == [
        "  step 2 s2 (run-command) cancelled by ops: wrong branch"
    ]


def test_follow_prints_only_status_news() -> None:
    said: list[str] = []
    news = [cli_runs._worth_saying(s, said) for s in ("queued", "running", "waiting", "failed")]
    assert news == [False, True, True, False]


def api_run(**changes: Any) -> dict[str, Any]:
    run = {"id": "3adf6780-1111-4222-8333-444455556666", "rule_id": "hello", "status": "queued",
           "trigger_type": "manual", "queued_at": "2026-01-01T12:00:00Z", "started_at": None,
           "finished_at": None, "error": None}  # fmt: skip
    return {**run, **changes}


def test_runs_rows_have_a_header_a_short_id_and_a_duration_or_a_dash() -> None:
    done = api_run(status="failed", started_at="2026-01-01T12:00:01Z",
                   finished_at="2026-01-01T12:03:06.5Z")  # fmt: skip
    rows = [cli_history.HEADER, cli_history.run_row(api_run()), cli_history.run_row(done)]
    assert rows == [
        "ID        QUEUED (UTC)         STATUS     DURATION  RULE                     TRIGGER",
        "3adf6780  2026-01-01 12:00:00  queued            -  hello                    manual",
        "3adf6780  2026-01-01 12:00:00  failed        3m05s  hello                    manual",
    ]


@pytest.mark.parametrize(
    ("started", "finished", "status", "expected"),
    [
        (None, None, "queued", "-"),
        ("2026-01-01T12:00:00Z", "2026-01-01T12:00:00.4Z", "succeeded", "0.4s"),
        ("2026-01-01T12:00:00Z", "2026-01-01T12:00:42Z", "succeeded", "42s"),
        ("2026-01-01T12:00:00Z", "2026-01-01T14:03:00Z", "succeeded", "2h03m"),
        ("2026-01-01T12:00:00Z", None, "cancelled", "-"),
    ],
)
def test_durations(started: str | None, finished: str | None, status: str, expected: str) -> None:
    assert cli_history.duration(started, finished, status) == expected


def test_a_cancelled_runs_step_is_shown_cancelled() -> None:
    reason = "cancelled by ops"
    run = api_run(status="cancelled", error=reason, finished_at="2026-01-01T12:00:05Z")
    killed = {"index": 0, "step_id": "long", "action_type": "run-command", "status": "failed",
              "exit_code": None, "error": reason, "finished_at": "2026-01-01T12:00:05Z",
              "output": "", "result": {}}  # fmt: skip
    assert run_stream.step_status(killed, run) == "cancelled"
    assert run_stream.step_status({**killed, "status": "succeeded"}, run) == "succeeded"


def test_stored_and_rebuilt_events_are_merged_in_time_order() -> None:
    run = api_run(status="succeeded", started_at="2026-01-01T12:00:00Z",
                  finished_at="2026-01-01T12:00:02Z")  # fmt: skip
    run["steps"] = [{"index": 0, "step_id": "a", "action_type": "run-command",
                     "status": "succeeded", "exit_code": 0, "error": None, "output": "hi\n",
                     "result": {}, "started_at": "2026-01-01T12:00:00Z",
                     "finished_at": "2026-01-01T12:00:01.5Z"}]  # fmt: skip
    stored = [{"id": 4, "at": "2026-01-01T12:00:01Z", "kind": "agent.message", "step_index": 0,
               "data": {}}]  # fmt: skip
    events = run_stream.merged(stored, run_stream.run_events_of(run), None)
    assert [e["kind"] for e in events] == ["step.started", "agent.message", "step.finished", "end"]
    assert events[2]["data"]["output_tail"] == "hi"


def commands(group: click.Group, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = [path]
    ctx = click.Context(group)
    for name in group.list_commands(ctx):  # not `.commands`: the groups import theirs lazily
        command = group.get_command(ctx, name)
        if isinstance(command, click.Group):
            found += commands(command, (*path, name))
        else:
            found.append((*path, name))
    return found


@pytest.mark.parametrize("path", commands(cli.main), ids=" ".join)
def test_every_command_accepts_dash_h(path: tuple[str, ...]) -> None:
    result = CliRunner().invoke(cli.main, [*path, "-h"])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("Usage: ")


def test_version_names_the_installed_package() -> None:
    from importlib.metadata import version

    done = subprocess.run([str(BIN / "ade-tasks"), "--version"], capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert done.returncode == 0 and done.stdout == f"ade-tasks, version {version('ade-tasks')}\n"


RUN_ID_COMMANDS = [
    ("runs", "show"), ("runs", "events"), ("runs", "cancel"), ("runs", "retry"),
    ("runs", "approve"), ("runs", "reject"), ("review", "move", "ignore"),
]  # fmt: skip


@pytest.mark.parametrize("command", RUN_ID_COMMANDS, ids=" ".join)
def test_a_run_id_that_cannot_be_one_is_a_one_line_usage_error(command: tuple[str, ...]) -> None:
    # Nothing listens at the URL: the id is refused before any request.
    result = CliRunner().invoke(cli.main, [*command, "not-a-run!", "--url", "http://127.0.0.1:9"])
    assert result.exit_code == 2
    assert result.output == (
        "error: 'not-a-run!' is not a run id; give the id `ade-tasks runs list` shows (or its "
        "first characters)\n"
    )
