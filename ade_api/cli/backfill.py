"""`ade-tasks rules backfill RULE --from ... --to ...`: fire a rule's missed schedule slots of a
past range through the API (`POST /api/v1/rules/{id}/backfill`), one line per slot and a
summary line."""

from __future__ import annotations

import json

import click

from ade_api.cli.root import Api, by_option, fail, json_option, rules, url_option
from ade_tasks.json_document import JsonObject
from ade_tasks.settings import Settings


def _zoned(value: str, option: str) -> str:
    """A time option checked before sending: an ISO 8601 timestamp with Z or an offset."""
    from ade_tasks.cron.slots import check_zoned

    try:
        return str(check_zoned(value, option).isoformat())
    except ValueError as exc:
        fail(str(exc))


def slot_line(slot: JsonObject) -> str:
    """One slot as the CLI prints it: when (UTC and local), which trigger, what, and why."""
    local = slot["local"][:16].replace("T", " ")
    when = f"{slot['slot'][:16].replace('T', ' ')} UTC ({local} {slot['timezone']})"
    run = f"  run {slot['run_id']}" if slot["run_id"] else ""
    return f"{when}  #{slot['trigger_index']}  {slot['result']:<15}{run}  {slot['detail']}"


@rules.command("backfill")
@click.argument("rule_id")
@click.option("--from", "start", required=True, metavar="TIME", help="first instant, inclusive")
@click.option("--to", "end", required=True, metavar="TIME", help="last instant, exclusive")
@click.option("--dry-run", is_flag=True, help="only explain: claim and fire nothing")
@click.option(
    "--include-skipped",
    is_flag=True,
    help="also fire slots skipped before any run existed (a pause, the kill switch)",
)
@click.option("--force", is_flag=True, help="backfill while ADE_DISABLE_AUTOMATIONS is on (admin)")
@by_option
@url_option
@json_option
@click.pass_obj
def rules_backfill(
    settings: Settings,
    rule_id: str,
    start: str,
    end: str,
    dry_run: bool,
    include_skipped: bool,
    force: bool,
    by: str | None,
    url: str | None,
    as_json: bool,
) -> None:
    """Fire the slots of RULE_ID's cron schedules in [--from, --to) that were missed or never
    claimed, once each, under the rule's overlap policy, and explain every slot. Times carry Z
    or an offset (2026-11-28T00:00:00+01:00); at most 1,000 slots per call."""
    body: JsonObject = {
        "from": _zoned(start, "--from"),
        "to": _zoned(end, "--to"),
        "dry_run": dry_run,
        "include_skipped": include_skipped,
        "force": force,
        "by": by,
    }
    report = Api(settings, url).call("POST", f"/api/v1/rules/{rule_id}/backfill", json=body)
    if as_json:
        click.echo(json.dumps(report, indent=2))
        return
    for slot in report["slots"]:
        click.echo(slot_line(slot))
    click.echo(report["summary"])
