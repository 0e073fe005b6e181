"""CLI commands for one run: `runs cancel`, `runs retry`, `runs events [--follow]`, `runs page`,
and the Server-Sent Events client that `run --wait` and `runs events --follow` share.

Each is a thin call of the HTTP API (see `ade_api.cli.Api`); following a run reads
`GET /api/v1/runs/{id}/events?follow=true` and reconnects from the last event id if the
connection drops.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

import click
import httpx

from ade_api.cli import Api, by_option, fail, json_option, runs, url_option
from ade_tasks.settings import Settings

#: The API sends a comment every 15 s; a silent connection this long is dead.
READ_TIMEOUT = 40.0
RECONNECTS = 5
TIMED_OUT = "timeout"


def sse_events(
    api: Api, run_id: str, *, after: int = 0, deadline: float | None = None
) -> Iterator[tuple[str, dict[str, Any]]]:
    """(kind, event) pairs of the run's event stream until its `end` event (included); a
    `timeout` pair when `deadline` (time.monotonic) passes first. Reconnects from the last event
    id after a dropped connection (at most RECONNECTS times in a row)."""
    path = f"/api/v1/runs/{run_id}/events"
    last_id, failures = after, 0
    while True:
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            yield TIMED_OUT, {}
            return
        read = READ_TIMEOUT if left is None else max(0.1, min(READ_TIMEOUT, left))
        try:
            with api.client.stream(
                "GET",
                path,
                params={"follow": "true", "after": last_id},
                timeout=httpx.Timeout(10.0, read=read),
            ) as response:
                if response.status_code >= 400:
                    response.read()
                    _refused(response, path)
                failures = 0
                for kind, event in _parse(response.iter_lines()):
                    if event.get("id") is not None:
                        last_id = int(event["id"])
                    yield kind, event
                    if kind == "end":
                        return
                    if deadline is not None and time.monotonic() >= deadline:
                        yield TIMED_OUT, {}
                        return
        except httpx.ReadTimeout:
            continue  # the deadline check above decides; else reconnect
        except httpx.TransportError as exc:
            failures += 1
            if failures > RECONNECTS:
                fail(
                    f"lost the event stream of run {run_id} at {api.base} ({exc}); "
                    f"look at it with `ade-tasks runs show {run_id}`",
                    code=1,
                )
            time.sleep(min(2.0, 0.2 * failures))


def _refused(response: httpx.Response, path: str) -> None:
    try:
        detail = response.json().get("detail", response.text)
    except ValueError:
        detail = response.text
    fail(f"GET {path} answered {response.status_code}: {detail}", code=1)


def _parse(lines: Iterator[str]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Server-Sent Events: `event:` and `data:` lines up to a blank line; comments skipped."""
    kind, data = "message", list[str]()
    for line in lines:
        if not line:
            if data:
                try:
                    event = json.loads("\n".join(data))
                except ValueError:
                    event = {"data": "\n".join(data)}
                yield kind, event
            kind, data = "message", list[str]()
        elif line.startswith(":"):
            yield "keep-alive", {}
        else:
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "event":
                kind = value
            elif name == "data":
                data.append(value)


def _step_label(data: dict[str, Any]) -> str:
    return f"step {int(data['index']) + 1} {data['step_id']} ({data['action_type']})"


def step_line(kind: str, data: dict[str, Any]) -> list[str]:
    """The progress lines of a `step.started` / `step.finished` event."""
    if kind == "step.started":
        return [f"  {_step_label(data)} started"]
    exit_code = f", exit {data['exit_code']}" if data.get("exit_code") is not None else ""
    error = f": {data['error']}" if data.get("error") and data["status"] != "succeeded" else ""
    lines = [f"  {_step_label(data)} {data['status']}{exit_code}{error}"]
    tail = (data.get("output_tail") or "").splitlines()
    return lines + [f"      | {line}" for line in tail]


def follow_run(api: Api, run_id: str, timeout: float, *, quiet: bool) -> dict[str, Any]:
    """Stream the run's progress (status changes, steps as they start and end) until it ends;
    returns the run as `GET /api/v1/runs/{id}` shows it then. Exits 1 after `timeout` s."""
    say: Callable[[str], None] = (lambda _msg: None) if quiet else click.echo
    started = time.monotonic()
    deadline = started + timeout if timeout else None
    seen: set[tuple[int, str]] = set()  # a reconnect may repeat step events
    for kind, event in sse_events(api, run_id, deadline=deadline):
        data = event.get("data") or {}
        if kind == TIMED_OUT:
            now = api.call("GET", f"/api/v1/runs/{run_id}")
            fail(
                f"run {run_id} is still {now['status']} after {timeout:g}s; "
                f"follow it with `ade-tasks runs events {run_id} --follow`",
                code=1,
            )
        if kind == "run.status" and data.get("status") not in (None, "succeeded"):
            where = f" on {data['worker']}" if data.get("worker") else ""
            say(f"  status: {data['status']}{where}")
        elif kind in ("step.started", "step.finished"):
            key = (int(data["index"]), kind)
            if key not in seen:
                seen.add(key)
                for line in step_line(kind, data):
                    say(line)
        elif kind == "end":
            break
    run = dict(api.call("GET", f"/api/v1/runs/{run_id}"))
    elapsed = time.monotonic() - started
    suffix = f": {run['error']}" if run.get("error") else ""
    say(f"run {run_id} {run['status']} after {elapsed:.1f}s{suffix}")
    return run


def _summary(data: dict[str, Any], width: int = 140) -> str:
    text = json.dumps(data, separators=(",", ":"), default=str)
    return text if len(text) <= width else text[: width - 3] + "..."


def event_line(event: dict[str, Any]) -> str:
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
    """Print a run's events; with --follow, print them as they happen (steps included) until
    the run ends. --json: a JSON list, or with --follow one JSON object per line."""
    api = Api(settings, url)
    if not follow:
        items = api.call(
            "GET", f"/api/v1/runs/{run_id}/events", params={"after": after, "limit": limit}
        )
        if as_json:
            click.echo(json.dumps(items, indent=2))
            return
        for item in items:
            click.echo(event_line(item))
        if len(items) == limit:
            click.echo(f"(more: --after {items[-1]['id']})")
        return
    for kind, event in sse_events(api, run_id, after=after):
        if kind == "keep-alive":
            continue
        click.echo(json.dumps(event, default=str) if as_json else event_line(event))
        sys.stdout.flush()


def _run_summary(run: dict[str, Any]) -> str:
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
    """Cancel a queued, waiting or running run (a running step's process tree is killed)."""
    result = Api(settings, url).call(
        "POST", f"/api/v1/runs/{run_id}/cancel", json={"by": by, "note": note}
    )
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
    """Start a new run of a finished run's rule with the same trigger."""
    api = Api(settings, url)
    result = api.call("POST", f"/api/v1/runs/{run_id}/retry", json={"by": by})
    report_started(api, result, f"run {result['run_id']} retries {run_id}", wait, timeout, as_json)


def report_started(
    api: Api, accepted: dict[str, Any], what: str, wait: bool, timeout: float, as_json: bool
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


@runs.command("page")
@click.option("--rule", help="only runs of this rule")
@click.option("--status", help="only runs in this status")
@click.option("--queue-status", help="only runs in this review-queue status")
@click.option("--trigger-type", help="only runs from this trigger type")
@click.option("--since", help="queued at or after (ISO 8601 with a zone, e.g. 2026-01-01T00:00Z)")
@click.option("--until", help="queued before (ISO 8601 with a zone)")
@click.option("--limit", type=click.IntRange(1, 500), default=50, show_default=True)
@click.option("--cursor", help="the cursor a previous page printed")
@click.option("--all", "every", is_flag=True, help="follow the cursors to the last page")
@url_option
@json_option
@click.pass_obj
def runs_page(
    settings: Settings,
    rule: str | None,
    status: str | None,
    queue_status: str | None,
    trigger_type: str | None,
    since: str | None,
    until: str | None,
    limit: int,
    cursor: str | None,
    every: bool,
    url: str | None,
    as_json: bool,
) -> None:
    """List runs a page at a time with every filter, newest first (--all: every page)."""
    api = Api(settings, url)
    params: dict[str, Any] = {"rule": rule, "status": status, "queue_status": queue_status,
                              "trigger_type": trigger_type, "since": since, "until": until,
                              "limit": limit}  # fmt: skip
    params = {k: v for k, v in params.items() if v is not None}
    while True:
        page = api.call("GET", "/api/v1/runs", params={**params, "cursor": cursor} if cursor
                        else params)  # fmt: skip
        if as_json:
            click.echo(json.dumps(page, indent=2))
        else:
            for item in page["items"]:
                click.echo(
                    f"{item['id']}  {item['queued_at'][:19]}  {item['status']:<10} "
                    f"{item['rule_id']:<24} {item['trigger_type']}"
                )
        cursor = page["next_cursor"]
        if not cursor:
            return
        if not every:
            if not as_json:
                click.echo(f"(more: --cursor {cursor})")
            return
