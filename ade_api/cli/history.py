"""CLI commands that read the run history: `runs list`, `runs page` and `runs show`.

Runs are shown by their short id (the first 8 characters, as on the web page); every command
that takes a run id accepts such a prefix (`Api.run_id`). A missing value prints as `-`.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import click

from ade_api.cli.root import Api, ApiTarget, json_option, runs, url_option
from ade_api.cli.run_stream import step_event_data
from ade_api.cli.step_lines import approval_line, step_line
from ade_tasks.json_document import JsonObject

if TYPE_CHECKING:
    from ade_tasks.settings import Settings

SHORT_ID = 8
MISSING = "-"
#: Statuses whose run (or step) still goes on: its duration so far is shown.
GOING = ("running", "waiting")
_ROW = "{id:<8}  {queued:<19}  {status:<10} {took:>8}  {rule:<24} {trigger}"
HEADER = _ROW.format(id="ID", queued="QUEUED (UTC)", status="STATUS", took="DURATION",
                     rule="RULE", trigger="TRIGGER")  # fmt: skip


def shown(value: object) -> str:
    """A value for a person to read: `-` when it is missing."""
    return MISSING if value is None or value == "" else str(value)


def _parse(stamp: str | None) -> datetime | None:
    return datetime.fromisoformat(stamp) if stamp else None


def duration(started: str | None, finished: str | None, status: str) -> str:
    """How long it took (`0.4s`, `12s`, `3m05s`, `2h03m`); so far, if it still runs; `-`
    if it never started."""
    begin, end = _parse(started), _parse(finished)
    if begin is None or (end is None and status not in GOING):
        return MISSING
    seconds = ((end or datetime.now(UTC)) - begin).total_seconds()
    if seconds < 10:
        return f"{max(seconds, 0):.1f}s"
    if seconds < 60:
        return f"{seconds:.0f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    return f"{minutes // 60}h{minutes % 60:02d}m"


def run_row(run: JsonObject) -> str:
    """One run as a row under HEADER; a manual run's trigger names who asked for it."""
    requester = (run.get("trigger") or {}).get("requested_by")
    return _ROW.format(
        id=run["id"][:SHORT_ID],
        queued=run["queued_at"][:19].replace("T", " "),
        status=run["status"],
        took=duration(run["started_at"], run["finished_at"], run["status"]),
        rule=run["rule_id"],
        trigger=f"{run['trigger_type']} by {requester}" if requester else run["trigger_type"],
    )


@runs.command("list")
@click.option("--rule", help="only runs of this rule")
@click.option("--status", help="only runs in this status")
@click.option("--trigger-type", help="only runs from this trigger type")
@click.option("--limit", type=click.IntRange(1, 500), default=20, show_default=True)
@url_option
@json_option
@click.pass_obj
def runs_list(
    address: ApiTarget,  # the address alone (registry.ADDRESS_ONLY): no pydantic to import
    rule: str | None,
    status: str | None,
    trigger_type: str | None,
    limit: int,
    url: str | None,
    as_json: bool,
) -> None:
    """List runs, newest first, by short id (any command takes it, or a longer prefix)."""
    params = {"rule": rule, "status": status, "trigger_type": trigger_type, "limit": limit}
    page = Api(address, url).get(
        "/api/v1/runs", params={k: v for k, v in params.items() if v is not None}
    )
    if as_json:
        click.echo(json.dumps(page, indent=2))
        return
    _print_rows(page["items"], header=True)
    if page["next_cursor"]:
        click.echo("(more: raise --limit, or page with `ade-tasks runs page --cursor`)")


def _print_rows(items: list[JsonObject], *, header: bool) -> None:
    if not items:
        click.echo("(no runs)")
        return
    if header:
        click.echo(HEADER)
    for item in items:
        click.echo(run_row(item))


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
    params: dict[str, object] = {"rule": rule, "status": status, "queue_status": queue_status,
                              "trigger_type": trigger_type, "since": since, "until": until,
                              "limit": limit}  # fmt: skip
    params = {k: v for k, v in params.items() if v is not None}
    first = True
    while True:
        page = api.call("GET", "/api/v1/runs", params={**params, "cursor": cursor} if cursor
                        else params)  # fmt: skip
        if as_json:
            click.echo(json.dumps(page, indent=2))
        elif page["items"] or first:
            _print_rows(page["items"], header=first)
        first = False
        cursor = page["next_cursor"]
        if not cursor:
            return
        if not every:
            if not as_json:
                click.echo(f"(more: --cursor {cursor})")
            return


@runs.command("show")
@click.argument("run_id")
@url_option
@json_option
@click.pass_obj
def runs_show(settings: Settings, run_id: str, url: str | None, as_json: bool) -> None:
    """Show one run (by id or unique id prefix) with its steps and their output."""
    api = Api(settings, url)
    run_id = api.run_id(run_id)
    item = api.call("GET", f"/api/v1/runs/{run_id}")
    if as_json:
        click.echo(json.dumps(item, indent=2))
        return
    took = duration(item["started_at"], item["finished_at"], item["status"])
    click.echo(f"run {item['id']}  rule {item['rule_id']} v{item['rule_version']}")
    click.echo(
        f"  status {item['status']}  trigger {item['trigger_type']}  queue {item['queue']}  "
        f"duration {took}"
    )
    click.echo(
        f"  queued {item['queued_at']}  started {shown(item['started_at'])}  "
        f"finished {shown(item['finished_at'])}"
    )
    if item.get("concurrency_key"):
        held = "  (buffered: waits for the key)" if item["buffered"] else ""
        click.echo(f"  concurrency key {item['concurrency_key']}{held}")
    if item["error"]:
        click.echo(f"  error: {item['error']}")
    if item["queue_status"]:
        confidence = MISSING if item["confidence"] is None else f"{item['confidence']:.2f}"
        click.echo(f"  review {item['queue_status']}  confidence {confidence}")
    for approval in item["approvals"]:
        click.echo(f"  {approval_line(approval)}")
    for finding in (item["findings"] or [])[:20]:
        where = finding.get("path") or finding.get("test_id") or MISSING
        click.echo(
            f"  finding {shown(finding.get('severity'))}: {where} {shown(finding.get('message'))}"
        )
    for thread in item.get("threads") or []:
        others = [r["run_id"][:8] for r in thread["runs"] if r["run_id"] != item["id"]]
        click.echo(f"  thread {thread['key']!r} (step {thread['step']}): "
                   f"{len(thread['continued'])} earlier session(s) given; "
                   f"other runs in it: {', '.join(others) or 'none'}")  # fmt: skip
    for step in item["steps"]:
        data = step_event_data(step, item)
        took = duration(step["started_at"], step["finished_at"], step["status"])
        (line, *_) = step_line("step.finished", data)
        click.echo(f"{line}  ({took})" if took != MISSING else line)
        for output in step["output"].rstrip().splitlines()[-40:]:
            click.echo(f"      | {output}")
