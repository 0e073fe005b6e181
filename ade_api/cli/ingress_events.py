"""CLI commands that read ingress events: `events list` and `events show`, the deliveries and
local events the cluster received and what matching made of each, rule by rule (why did
nothing run?).

The group is `events` beside the top-level `emit`, `hooks` and `watch` that send events
(`cli/events.py`); `runs events` is a run's own transcript, a different thing.
"""

from __future__ import annotations

import json
from datetime import datetime

import click

from ade_api.cli.root import Api, json_option, main, url_option
from ade_tasks.ingress.event import EVENT_SOURCES
from ade_tasks.json_document import JsonObject
from ade_tasks.settings import Settings
from ade_tasks.states import IngressStatus
from ade_tasks.triggers import verdicts

EVENTS_PATH = "/api/v1/ingress/events"
_ROW = "{id:>7}  {received:<19}  {source:<16} {status:<10}  {type:<26} {runs:>4}  {verdicts}"
HEADER = _ROW.format(id="ID", received="RECEIVED (UTC)", source="SOURCE", status="STATUS",
                     type="TYPE", runs="RUNS", verdicts="VERDICTS")  # fmt: skip


@main.group("events")
def events() -> None:
    """Ingress events (webhook deliveries, git and file events) and why each rule ran or not."""


def _source(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    if value is None or value in EVENT_SOURCES or value.startswith("webhook:"):
        return value
    known = ", ".join(sorted(EVENT_SOURCES))
    raise click.BadParameter(f"{value!r} is no event source; use one of {known} or webhook:HOOK")


def _since(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    if value is None:
        return None
    try:
        stamp = datetime.fromisoformat(value)
    except ValueError:
        raise click.BadParameter(
            f"{value!r} is no ISO 8601 time; write e.g. 2026-12-01T09:00Z"
        ) from None
    if stamp.tzinfo is None:
        raise click.BadParameter(f"{value!r} has no time zone; add one, e.g. Z or +00:00")
    return stamp.isoformat()


def event_row(event: JsonObject) -> str:
    """One event as a row under HEADER."""
    return _ROW.format(
        id=event["id"],
        received=event["received_at"][:19].replace("T", " "),
        source=event["source"][:16],
        status=event["status"],
        type=(event["trigger_type"] or event["event_key"])[:26],
        runs=len(event["runs"] or []),
        verdicts=verdicts.summary(event.get("matching")),
    )


def verdict_line(entry: JsonObject) -> str:
    """One rule's verdict: `pr-fix  trigger #0  refused by labels: missing label(s) x`."""
    trigger = f"trigger #{entry['trigger']}" if entry.get("trigger") is not None else ""
    verdict = entry["verdict"]
    if entry.get("filter"):
        verdict += f" by {entry['filter']}"
    detail = entry.get("reason") or ""
    if entry.get("run"):
        detail = f"run {entry['run']}" + (f" ({detail})" if detail else "")
    via = f" [{entry['event']}]" if entry.get("event") else ""
    line = f"    {entry['rule']:<24} {trigger:<11} {verdict}{via}"
    return f"{line}: {detail}" if detail else line


def matching_lines(matching: JsonObject | None) -> list[str]:
    """What `events show` prints of an event's matching record."""
    if matching is None:
        return ["  matching: not recorded (not matched yet, or matched before verdicts were kept)"]
    if matching.get("held"):
        return [f"  matching: {matching['held']} (since {matching.get('held_at') or '-'})"]
    lines = ["  matching:"]
    if matching.get("note"):
        lines.append(f"    {matching['note']}")
    lines += [verdict_line(entry) for entry in matching.get("rules") or []]
    if matching.get("left_out"):
        counts = ", ".join(f"{k} {v}" for k, v in (matching.get("counts") or {}).items())
        lines.append(f"    ({matching['left_out']} more not kept; all verdicts: {counts})")
    return lines


@events.command("list")
@click.option("--source", callback=_source, help="github, git, file, poll, lane or webhook:HOOK")
@click.option("--status", type=click.Choice([s.value for s in IngressStatus]))
@click.option("--since", callback=_since, help="received at or after (ISO 8601 with a zone)")
@click.option("--limit", type=click.IntRange(1, 500), default=20, show_default=True)
@url_option
@json_option
@click.pass_obj
def events_list(
    settings: Settings,
    source: str | None,
    status: str | None,
    since: str | None,
    limit: int,
    url: str | None,
    as_json: bool,
) -> None:
    """List ingress events, newest first, with what matching made of each."""
    params = {"source": source, "status": status, "since": since, "limit": limit}
    page = Api(settings, url).call(
        "GET", EVENTS_PATH, params={k: v for k, v in params.items() if v is not None}
    )
    if as_json:
        click.echo(json.dumps(page, indent=2))
        return
    if not page["items"]:
        click.echo("(no events)")
        return
    click.echo(HEADER)
    for item in page["items"]:
        click.echo(event_row(item))
    if page["next_before"] is not None:
        click.echo("(more: raise --limit or narrow with --source, --status, --since)")


@events.command("show")
@click.argument("event_id", type=click.IntRange(1))
@url_option
@json_option
@click.pass_obj
def events_show(settings: Settings, event_id: int, url: str | None, as_json: bool) -> None:
    """Show one ingress event and each candidate rule's verdict (the filter that refused it and
    the value it saw, or the run it started)."""
    item = Api(settings, url).call("GET", f"{EVENTS_PATH}/{event_id}")
    if as_json:
        click.echo(json.dumps(item, indent=2))
        return
    delivery = f"  delivery {item['delivery_id']}" if item["delivery_id"] else ""
    click.echo(f"event {item['id']}  {item['source']}{delivery}  {item['event_key']}")
    click.echo(f"  {item['summary']}")
    click.echo(
        f"  status {item['status']}  type {item['trigger_type'] or '-'}  received "
        f"{item['received_at']}  processed {item['processed_at'] or '-'}"
    )
    if item["error"]:
        click.echo(f"  error: {item['error']}")
    click.echo(f"  runs: {', '.join(item['runs'] or []) or '(none)'}")
    for line in matching_lines(item.get("matching")):
        click.echo(line)
