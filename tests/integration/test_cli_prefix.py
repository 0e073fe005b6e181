"""The CLI against a real `ade-tasks api`, `celery worker`, PostgreSQL and Redis, as an operator
drives it: `run --wait` in the order things happened, the runs table, short id prefixes for
every command that takes a run id, step events for every run, and a one-line error with exit
code 2 (usage) or 1 (failure) for every wrong id, ambiguous prefix, unreachable API or bad
token."""

from __future__ import annotations

import subprocess
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

from ade_tasks.runs.dispatch import dispatch
from ade_tasks.runs.trigger_events import TriggerEvent
from tests.integration.conftest import Cluster
from tests.integration.test_cli_cluster import cli
from tests.integration.test_run_path import add_rule, finished
from tests.support import free_port, wait_until

CHAIN = (
    '            - {id: one, type: run-command, command: "echo one"}\n'
    '            - {id: two, type: run-command, command: "echo two; exit 3"}\n'
    '            - {id: three, type: run-command, command: "echo three"}'
)


def start(cluster: Cluster, rule_id: str) -> str:
    return dispatch(
        cluster.session_factory, cluster.sender(), rule_id, TriggerEvent.manual()
    ).run.id


def test_run_wait_prints_steps_in_order_with_the_skip_reason_and_the_outcome_last(
    cluster: Cluster,
) -> None:
    # Given a rule whose second step fails, so its third is skipped
    add_rule(cluster, "chain", CHAIN)
    cluster.worker()
    url = str(cluster.api().base_url)
    # When the operator runs it and waits
    ran = cli(cluster, "run", "chain", "--wait", "--url", url)
    # Then the steps come in order, the skipped one once with its reason, the outcome last
    assert ran.returncode == 1, ran.stderr
    lines = [line for line in ran.stdout.splitlines() if not line.startswith("      |")]
    statuses = [line for line in lines if line.startswith("  status: ")]
    assert all(line.startswith("  status: running on ") for line in statuses)  # if seen at all
    assert [line for line in lines[1:] if line not in statuses] == [
        "  step 1 one (run-command) started",
        "  step 1 one (run-command) succeeded, exit 0",
        "  step 2 two (run-command) started",
        "  step 2 two (run-command) failed, exit 3: command exited with status 3",
        "  step 3 three (run-command) skipped: an earlier step failed",
        lines[-1],
    ]
    assert lines[-1].startswith("run ") and " failed after " in lines[-1]
    assert "None" not in ran.stdout


def test_runs_list_show_and_events_take_the_short_id_and_print_no_none(
    cluster: Cluster,
) -> None:
    add_rule(cluster, "chain", CHAIN)
    cluster.worker()
    url = str(cluster.api().base_url)
    run_id = start(cluster, "chain")
    finished(cluster, run_id)

    listed = cli(cluster, "runs", "list", "--url", url)
    assert listed.returncode == 0, listed.stderr
    header, row = listed.stdout.splitlines()[:2]
    assert header.split() == ["ID", "QUEUED", "(UTC)", "STATUS", "DURATION", "RULE", "TRIGGER"]
    short = row.split()[0]
    assert short == run_id[:8] and row.split()[3] == "failed" and row.split()[4].endswith("s")

    shown = cli(cluster, "runs", "show", short, "--url", url)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith(f"run {run_id}  rule chain v1")
    assert "  step 3 three (run-command) skipped: an earlier step failed" in shown.stdout
    assert "None" not in shown.stdout

    events = cli(cluster, "runs", "events", short, "--url", url)
    assert events.returncode == 0, events.stderr
    kinds = [line.split()[2] for line in events.stdout.splitlines()]
    assert kinds == ["step.started", "step.finished", "step.started", "step.finished",
                     "step.finished", "end"]  # fmt: skip
    assert "step 3 three (run-command) skipped: an earlier step failed" in events.stdout


def test_a_step_the_cancel_ended_shows_as_cancelled(cluster: Cluster) -> None:
    # Given a run whose only step is running
    add_rule(cluster, "long", '            - {id: nap, type: run-command, command: "sleep 60"}')
    cluster.worker()
    api = cluster.api()
    run_id = start(cluster, "long")
    wait_until(
        lambda: (
            [s["status"] for s in api.get(f"/api/v1/runs/{run_id}").json()["steps"]] == ["running"]
        ),
        20,
        "the step to run",
    )
    # When the operator cancels it by its short id
    url = str(api.base_url)
    cancelled = cli(cluster, "runs", "cancel", run_id[:8], "--note", "wrong branch", "--url", url)
    assert cancelled.returncode == 0, cancelled.stderr
    # Then its step shows what happened to it, not `failed`
    finished(cluster, run_id)
    shown = cli(cluster, "runs", "show", run_id[:8], "--url", url)
    assert "  step 1 nap (run-command) cancelled by tests: wrong branch" in shown.stdout
    events = cli(cluster, "runs", "events", run_id[:8], "--url", url)
    assert "step 1 nap (run-command) cancelled by tests: wrong branch" in events.stdout


def test_a_queued_runs_missing_values_print_as_a_dash(cluster: Cluster) -> None:
    add_rule(cluster, "later", '            - {id: a, type: run-command, command: "true"}')
    url = str(cluster.api().base_url)
    run_id = start(cluster, "later")  # no worker: it stays queued
    shown = cli(cluster, "runs", "show", run_id[:6], "--url", url)
    assert shown.returncode == 0, shown.stderr
    assert "started -  finished -" in shown.stdout and "duration -" in shown.stdout
    assert "None" not in shown.stdout


def ambiguous_prefix(run_ids: list[str]) -> str:
    """A first character that at least two of the runs' ids share (17 ids: there is one)."""
    (char, count), *_ = Counter(run_id[0] for run_id in run_ids).most_common(1)
    assert count > 1
    return char


RUN_ID_COMMANDS = [
    ("runs", "show"), ("runs", "events"), ("runs", "cancel"), ("runs", "retry"),
    ("runs", "approve"), ("runs", "reject"), ("review", "move", "ignore"),
]  # fmt: skip


def cli_each(
    cluster: Cluster, commands: list[tuple[str, ...]], env: dict[str, str] | None = None
) -> list[subprocess.CompletedProcess[str]]:
    """Each command, run side by side (they only read or are refused): a second a CLI start."""
    with ThreadPoolExecutor(8) as pool:
        return list(pool.map(lambda command: cli(cluster, *command, env=env), commands))


def one_line_error(done: subprocess.CompletedProcess[str]) -> str:
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    return lines[0]


def test_every_run_id_command_resolves_prefixes_and_refuses_wrong_or_ambiguous_ones(
    cluster: Cluster,
) -> None:
    # Given 17 queued runs (two of them share a first character)
    add_rule(cluster, "idle", '            - {id: a, type: run-command, command: "true"}')
    url = str(cluster.api().base_url)
    run_ids = [start(cluster, "idle") for _ in range(17)]
    shared = ambiguous_prefix(run_ids)
    unused = next(c for c in "0123456789abcdef" if not any(r.startswith(c) for r in run_ids))
    missing = str(uuid.uuid4())
    matching = [r for r in run_ids if r.startswith(shared)]
    # An ambiguous prefix names the runs it matches: a usage error
    for command, done in zip(RUN_ID_COMMANDS, cli_each(
        cluster, [(*command, shared, "--url", url) for command in RUN_ID_COMMANDS]
    ), strict=True):  # fmt: skip
        assert done.returncode == 2, (command, done.stderr)
        line = one_line_error(done)
        assert f"run id prefix {shared!r} is ambiguous" in line and "give more characters" in line
        assert all(r[:5] in line for r in matching[:5])
    # A prefix no run has, or a full id of no run: a failure, saying where to look
    wrong = [(*command, bad, "--url", url) for command in RUN_ID_COMMANDS
             for bad in (unused * 6, missing)]  # fmt: skip
    for command, done in zip(wrong, cli_each(cluster, wrong), strict=True):
        assert done.returncode == 1, (command, done.stderr)
        assert "runs list" in one_line_error(done)
    # And a unique prefix reaches the run (a queued run can be cancelled)
    target = next(r for r in run_ids if sum(o.startswith(r[:8]) for o in run_ids) == 1)
    cancelled = cli(cluster, "runs", "cancel", target[:8], "--url", url)
    assert cancelled.returncode == 0, cancelled.stderr
    assert cancelled.stdout.startswith(f"run {target} (was queued)")


API_COMMANDS = [
    *((*command, "3adf6780") for command in RUN_ID_COMMANDS),
    ("runs", "list"), ("runs", "page"), ("run", "hello"), ("rules", "list"),
    ("review", "list"), ("inputs", "list"), ("lanes", "list"), ("cleanups", "list"),
]  # fmt: skip


def test_an_unreachable_api_is_a_one_line_failure(cluster: Cluster) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    for command, done in zip(API_COMMANDS, cli_each(
        cluster, [(*command, "--url", url) for command in API_COMMANDS]
    ), strict=True):  # fmt: skip
        assert done.returncode == 1, (command, done.stderr)
        line = one_line_error(done)
        assert f"cannot reach the ADE API at {url}" in line and "ade-tasks dev" in line


def test_a_missing_or_invalid_token_is_a_one_line_usage_error(cluster: Cluster) -> None:
    url = str(cluster.api().base_url)
    without = {k: v for k, v in cluster.env.items() if k != "ADE_API_TOKEN"}
    cases = ((without, "no API token to send"), ({**cluster.env, "ADE_API_TOKEN": "x"}, "refused"))
    for env, said in cases:
        commands = [(*command, "--url", url) for command in API_COMMANDS]
        for command, done in zip(commands, cli_each(cluster, commands, env), strict=True):
            assert done.returncode == 2, (command, done.stderr)
            line = one_line_error(done)
            assert said in line and "ADE_API_TOKEN" in line, line
