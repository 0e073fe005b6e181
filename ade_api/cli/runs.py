"""CLI commands for one run: `run [--wait]`, `runs cancel`, `runs retry`, `runs events
[--follow]`, `runs scheduled`, `runs cancel-scheduled`.

Each is a thin call of the HTTP API (see `ade_api.cli.Api`); following a run reads its event
stream (ade_api/cli/run_stream.py), which reconnects from the last event id if the connection
drops.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from datetime import datetime

import click

from ade_api.cli.root import Api, by_option, fail, json_option, main, runs, url_option
from ade_api.cli.run_stream import FINAL, TIMED_OUT, merged, run_events_of, sse_events
from ade_api.cli.step_lines import LiveLines, step_line
from ade_tasks.json_document import JsonObject
from ade_tasks.settings import Settings


def follow_run(api: Api, run_id: str, timeout: float, *, quiet: bool) -> JsonObject:
    """Stream the run's progress (status changes, steps as they start and end, a running
    step's output as it prints) until it ends; returns the run as `GET /api/v1/runs/{id}`
    shows it then. Exits 1 after `timeout` s."""
    say: Callable[[str], None] = (lambda _msg: None) if quiet else click.echo
    started = time.monotonic()
    deadline = started + timeout if timeout else None
    seen: set[tuple[int, str]] = set()  # a reconnect may repeat step events
    said: list[str] = []
    live = LiveLines()
    for kind, event in sse_events(api, run_id, deadline=deadline):
        data = event.get("data") or {}
        if kind == TIMED_OUT:
            now = api.call("GET", f"/api/v1/runs/{run_id}")
            fail(
                f"run {run_id} is still {now['status']} after {timeout:g}s; "
                f"follow it with `ade-tasks runs events {run_id} --follow`",
                code=1,
            )
        if kind == "run.status" and _worth_saying(data.get("status"), said):
            where = f" on {data['worker']}" if data.get("worker") else ""
            say(f"  status: {data['status']}{where}")
        elif kind in ("step.started", "step.finished"):
            key = (int(data["index"]), kind)
            if key not in seen:
                seen.add(key)
                lines = live.finished(data) if kind == "step.finished" else step_line(kind, data)
                for line in lines:
                    say(line)
        elif kind == "step.output" and event.get("step_index") is not None:
            for line in live.feed(int(event["step_index"]), data):
                say(line)
        elif kind == "end":
            break
    run = dict(api.call("GET", f"/api/v1/runs/{run_id}"))
    elapsed = time.monotonic() - started
    suffix = f": {run['error']}" if run.get("error") else ""
    say(f"run {run_id} {run['status']} after {elapsed:.1f}s{suffix}")
    return run


def _worth_saying(status: str | None, said: list[str]) -> bool:
    """Whether a status change is news: not the `queued` the start line said, not the final
    status the last line says."""
    first, news = not said, status is not None and status not in FINAL
    if status is not None:
        said.append(status)
    return news and not (first and status == "queued")


def _summary(data: JsonObject, width: int = 140) -> str:
    text = json.dumps(data, separators=(",", ":"), default=str)
    return text if len(text) <= width else text[: width - 3] + "..."


def event_line(event: JsonObject) -> str:
    """One event as a line: id, time, kind, its data (shortened)."""
    at = str(event.get("at") or "")
    try:
        at = datetime.fromisoformat(at).strftime("%H:%M:%S")
    except ValueError:
        pass
    kind = str(event.get("kind"))
    data = event.get("data") or {}
    if kind in ("step.started", "step.finished"):
        text = "; ".join(line.strip() for line in step_line(kind, data)[:1])
    elif kind == "end":
        text = f"run {data.get('status')}" + (f": {data['error']}" if data.get("error") else "")
    else:
        text = _summary(data)
    event_id = event.get("id")
    return f"{'-' if event_id is None else event_id:>7}  {at}  {kind:<24} {text}"


@runs.command("events")
@click.argument("run_id")
@click.option("--follow", "-f", is_flag=True, help="keep printing new events until the run ends")
@click.option("--after", type=click.IntRange(0), default=0, help="only events after this id")
@click.option("--limit", type=click.IntRange(1, 5000), default=1000, show_default=True)
@url_option
@json_option
@click.pass_obj
def runs_events(
    settings: Settings,
    run_id: str,
    follow: bool,
    after: int,
    limit: int,
    url: str | None,
    as_json: bool,
) -> None:
    """Print a run's events (by id or unique id prefix), its steps' starts and ends among
    them as --follow shows them; with --follow, print them as they happen until the run ends.
    --json: a JSON list, or with --follow one JSON object per line."""
    api = Api(settings, url)
    run_id = api.run_id(run_id)
    if follow:
        for kind, event in sse_events(api, run_id, after=after):
            if kind == "keep-alive":
                continue
            click.echo(json.dumps(event, default=str) if as_json else event_line(event))
            sys.stdout.flush()
        return
    items = api.call(
        "GET", f"/api/v1/runs/{run_id}/events", params={"after": after, "limit": limit}
    )
    full = len(items) == limit
    if not after:  # the step events belong with the first page (a later one has only events)
        until = datetime.fromisoformat(items[-1]["at"]) if full else None
        items = merged(items, run_events_of(api.call("GET", f"/api/v1/runs/{run_id}")), until)
    if as_json:
        click.echo(json.dumps(items, indent=2))
    else:
        for item in items:
            click.echo(event_line(item))
    if full and not as_json:
        last = max(item["id"] for item in items if item["id"] is not None)
        click.echo(f"(more: --after {last})")


def _run_summary(run: JsonObject) -> str:
    error = f"  {run['error']}" if run.get("error") else ""
    return f"{run['id']}  {run['status']:<10} {run['rule_id']}{error}"


@runs.command("cancel")
@click.argument("run_id")
@by_option
@click.option("--note", help="why (kept with the run)")
@url_option
@json_option
@click.pass_obj
def runs_cancel(
    settings: Settings,
    run_id: str,
    by: str | None,
    note: str | None,
    url: str | None,
    as_json: bool,
) -> None:
    """Cancel a queued, waiting or running run (by id or unique id prefix); a running step's
    process tree is killed."""
    api = Api(settings, url)
    run_id = api.run_id(run_id)
    result = api.call("POST", f"/api/v1/runs/{run_id}/cancel", json={"by": by, "note": note})
    if as_json:
        click.echo(json.dumps(result, indent=2))
        return
    click.echo(f"run {run_id} (was {result['was']}): {result['message']}")


@runs.command("retry")
@click.argument("run_id")
@by_option
@click.option("--wait", is_flag=True, help="follow the new run; exit 0 if it succeeded")
@click.option("--timeout", type=float, default=0, help="with --wait: give up after this many s")
@url_option
@json_option
@click.pass_obj
def runs_retry(
    settings: Settings,
    run_id: str,
    by: str | None,
    wait: bool,
    timeout: float,
    url: str | None,
    as_json: bool,
) -> None:
    """Start a new run of a finished run's rule (by id or unique id prefix) with the same
    trigger."""
    api = Api(settings, url)
    run_id = api.run_id(run_id)
    result = api.call("POST", f"/api/v1/runs/{run_id}/retry", json={"by": by})
    report_started(api, result, f"run {result['run_id']} retries {run_id}", wait, timeout, as_json)


def report_started(
    api: Api, accepted: JsonObject, what: str, wait: bool, timeout: float, as_json: bool
) -> None:
    """Say a run was started; with `wait`, follow it to its end and exit 0 only if it
    succeeded (`run --wait`, `runs retry --wait`)."""
    if not as_json:
        click.echo(f"{what}: {accepted['message']}")
    if not wait:
        if as_json:
            click.echo(json.dumps(accepted, indent=2))
        return
    final = follow_run(api, accepted["run_id"], timeout, quiet=as_json)
    if as_json:
        click.echo(json.dumps(final, indent=2))
    sys.exit(0 if final["status"] == "succeeded" else 1)


def report_scheduled(scheduled: JsonObject, as_json: bool) -> None:
    """Say a run was scheduled (`run --at/--in`)."""
    if as_json:
        click.echo(json.dumps(scheduled, indent=2))
        return
    click.echo(
        f"scheduled run {scheduled['id']} of {scheduled['rule_id']} fires at "
        f"{scheduled['run_at']}; `ade-tasks runs cancel-scheduled {scheduled['id']}` cancels it"
    )


@runs.command("scheduled")
@click.option("--rule", "rule_id", help="only this rule's")
@click.option(
    "--all", "show_all", is_flag=True, help="also those that fired, missed or were cancelled"
)
@url_option
@json_option
@click.pass_obj
def runs_scheduled(
    settings: Settings, rule_id: str | None, show_all: bool, url: str | None, as_json: bool
) -> None:
    """Scheduled runs (one-shot triggers and `run --at/--in`), soonest first: pending ones
    unless --all."""
    params: dict[str, object] = {"limit": 1000}
    if rule_id:
        params["rule_id"] = rule_id
    if not show_all:
        params["status"] = ["pending", "claimed"]
    rows = Api(settings, url).call("GET", "/api/v1/scheduled-runs", params=params)
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        click.echo("no scheduled runs" + ("" if show_all else " pending (--all shows the rest)"))
    for row in rows:
        what = f"trigger #{row['trigger_index']}" if row["trigger_index"] is not None else "manual"
        outcome = f"  run {row['run_id']}" if row.get("run_id") else ""
        reason = f"  {row['reason']}" if row.get("reason") else ""
        click.echo(
            f"{row['id']}  {row['run_at']}  {row['status']:<9} {row['rule_id']} ({what})"
            f"{outcome}{reason}"
        )


@runs.command("cancel-scheduled")
@click.argument("scheduled_id")
@by_option
@url_option
@json_option
@click.pass_obj
def runs_cancel_scheduled(
    settings: Settings, scheduled_id: str, by: str | None, url: str | None, as_json: bool
) -> None:
    """Cancel a scheduled run before it fires."""
    row = Api(settings, url).call(
        "POST", f"/api/v1/scheduled-runs/{scheduled_id}/cancel", json={"by": by}
    )
    if as_json:
        click.echo(json.dumps(row, indent=2))
        return
    click.echo(f"scheduled run {scheduled_id} cancelled: {row['reason']}")


def _parse_inputs(pairs: tuple[str, ...]) -> dict[str, str]:
    inputs = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            fail(f"--input {pair!r} must look like name=value")
        inputs[name] = value
    return inputs


@main.command("run")
@click.argument("rule_id")
@click.option("--input", "inputs", multiple=True, metavar="NAME=VALUE", help="a manual input")
@click.option(
    "--wait", is_flag=True, help="follow the run's steps until it ends; exit 0 if it succeeded"
)
@click.option("--idempotency-key", help="retrying with the same key never starts a second run")
@click.option(
    "--timeout", type=float, default=0, help="with --wait: give up after this many seconds"
)
@click.option(
    "--force", is_flag=True, help="run even while ADE_DISABLE_AUTOMATIONS is on (admin token)"
)
@click.option(
    "--at",
    "at",
    metavar="TIME",
    help="fire once at TIME instead of now (2026-12-24T18:00:00+01:00)",
)
@click.option("--in", "delay", metavar="DURATION", help="fire once after DURATION (90s, 10m, 2h)")
@url_option
@json_option
@click.pass_obj
def run(
    settings: Settings,
    rule_id: str,
    inputs: tuple[str, ...],
    wait: bool,
    idempotency_key: str | None,
    timeout: float,
    force: bool,
    at: str | None,
    delay: str | None,
    url: str | None,
    as_json: bool,
) -> None:
    """Start a manual run of RULE_ID now, or schedule it with --at or --in (listed by `runs
    scheduled`, cancelled by `runs cancel-scheduled` until it fires)."""
    body: JsonObject = {"inputs": _parse_inputs(inputs)}
    body.update(_when(at, delay, wait))
    api = Api(settings, url)
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
    if force:
        body["force"] = True
    accepted = api.call("POST", f"/api/v1/rules/{rule_id}/runs", json=body, headers=headers)
    if "run_at" in accepted:  # scheduled, not started
        report_scheduled(accepted, as_json)
        return

    report_started(api, accepted, f"run {accepted['run_id']}", wait, timeout, as_json)


def _when(at: str | None, delay: str | None, wait: bool) -> JsonObject:
    """`--at` / `--in` as the request's `run_at` / `delay_seconds`, checked before sending."""
    from ade_tasks.cron.slots import check_zoned, parse_delay
    from ade_tasks.errors import AdeError

    if at is None and delay is None:
        return {}
    if at is not None and delay is not None:
        fail("give --at TIME or --in DURATION, not both")
    if wait:
        fail("--wait follows a run started now; a scheduled run is followed with `runs list`")
    if at is not None:
        try:
            return {"run_at": check_zoned(at, "--at").isoformat()}
        except ValueError as exc:
            fail(str(exc))
    try:
        seconds = parse_delay(str(delay)).total_seconds()
    except AdeError as exc:
        fail(exc.message)
    if seconds != int(seconds):
        fail(f"--in {delay!r}: give whole seconds")
    return {"delay_seconds": int(seconds)}
