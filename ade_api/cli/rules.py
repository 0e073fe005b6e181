"""CLI commands that manage rules through the HTTP API (so they work against a remote cluster):
`rules show|create|update|delete|enable|disable|pause|resume|versions`, and `usage` per
billing code.

Each is a thin call of the API (see `ade_api.cli.Api`: `--url` / ADE_API_URL, the token from
ADE_API_TOKEN); `--json` prints the API's answer for scripts.
"""

from __future__ import annotations

import json
import sys
from datetime import date, datetime

import click
import yaml

from ade_api.cli.health import health_lines, state_word
from ade_api.cli.root import Api, by_option, fail, json_option, main, rules, url_option
from ade_tasks.json_document import JsonObject
from ade_tasks.limits import load_yaml
from ade_tasks.settings import Settings


def _echo_json(data: object) -> None:
    click.echo(json.dumps(data, indent=2))


def _read(file: str) -> str:
    try:
        if file == "-":
            return sys.stdin.read()
        with open(file, encoding="utf-8") as handle:
            return handle.read()
    except (OSError, UnicodeDecodeError) as exc:
        fail(f"cannot read {file}: {exc}")


def _summary(rule: JsonObject) -> str:
    state = state_word(rule)
    where = rule["source_file"] or rule["source"]
    return f"rule {rule['id']} v{rule['version']} ({state}, from {where})"


@rules.command("show")
@click.argument("rule_id")
@url_option
@json_option
@click.pass_obj
def rules_show(settings: Settings, rule_id: str, url: str | None, as_json: bool) -> None:
    """Show one rule with its health (per trigger, the path that fires it or why nothing can),
    its document (as YAML) and its problems (a schedule that cannot fire; with --json under
    `problems`)."""
    api = Api(settings, url)
    rule = api.call("GET", f"/api/v1/rules/{rule_id}")
    problems = _problems(api, rule)
    if as_json:
        _echo_json({**rule, "problems": problems})
        return
    click.echo(_summary(rule))
    click.echo(f"  content {rule['content_hash'][:12]}  updated {rule['updated_at']}")
    for line in health_lines(rule):
        click.echo(f"  {line}")
    for problem in problems:
        click.echo(f"  problem: {problem}")
    click.echo(yaml.safe_dump(rule["document"], sort_keys=False).rstrip())


def _problems(api: Api, rule: JsonObject) -> list[str]:
    """The rule's problems as the API reports them (its schedules' preview)."""
    triggers = rule["document"].get("triggers") or []
    if not any(isinstance(t, dict) and t.get("type") == "schedule" for t in triggers):
        return []
    preview = api.call("GET", f"/api/v1/rules/{rule['id']}/schedule", params={"count": 1})
    return list(preview.get("problems", []))


@rules.command("create")
@click.argument("file")
@by_option
@url_option
@json_option
@click.pass_obj
def rules_create(settings: Settings, file: str, by: str, url: str | None, as_json: bool) -> None:
    """Create a rule from a YAML FILE holding one rule (`-`: standard input). It is recorded as
    created through the API, so it may not call admin-only ade-actions."""
    body = {"yaml": _read(file), "by": by}
    rule = Api(settings, url).call("POST", "/api/v1/rules", json=body)
    if as_json:
        _echo_json(rule)
        return
    click.echo(f"created {_summary(rule)}")


@rules.command("update")
@click.argument("file")
@click.option("--id", "rule_id", help="the rule to replace (default: the `id` in FILE)")
@by_option
@url_option
@json_option
@click.pass_obj
def rules_update(
    settings: Settings,
    file: str,
    rule_id: str | None,
    by: str,
    url: str | None,
    as_json: bool,
) -> None:
    """Replace a rule created through the API with the rule in a YAML FILE (`-`: standard input);
    a changed document becomes its next version. Rules from files: edit the file and sync."""
    text = _read(file)
    if rule_id is None:
        try:
            document = load_yaml(text)
        except (ValueError, yaml.YAMLError):  # malformed, too deep, too big: the API says where
            document = None
        if isinstance(document, dict) and isinstance(document.get("id"), str):
            rule_id = document["id"]
        else:
            fail(f"{file} names no rule `id`; pass the rule to replace with --id")
    api = Api(settings, url)
    before = api.call("GET", f"/api/v1/rules/{rule_id}")
    rule = api.call("PUT", f"/api/v1/rules/{rule_id}", json={"yaml": text, "by": by})
    if as_json:
        _echo_json(rule)
        return
    if rule["version"] == before["version"]:
        click.echo(f"unchanged {_summary(rule)}")
    else:
        click.echo(f"updated {_summary(rule)} (was v{before['version']})")


@rules.command("delete")
@click.argument("rule_id")
@by_option
@url_option
@json_option
@click.pass_obj
def rules_delete(settings: Settings, rule_id: str, by: str, url: str | None, as_json: bool) -> None:
    """Delete a rule created through the API (refused while a run of it is unfinished); its runs
    and version history are kept."""
    result = Api(settings, url).call("DELETE", f"/api/v1/rules/{rule_id}", params={"by": by})
    if as_json:
        _echo_json(result)
        return
    click.echo(result["message"])


def _switch(
    settings: Settings,
    rule_id: str,
    action: str,
    url: str | None,
    as_json: bool,
    force: bool = False,
) -> None:
    params = {"force": "true"} if force else None
    rule = Api(settings, url).call("POST", f"/api/v1/rules/{rule_id}/{action}", params=params)
    if as_json:
        _echo_json(rule)
        return
    click.echo(_summary(rule))
    if rule["source"] == "file":
        click.echo("(a rule from a file: its file's `enabled` applies again when the file changes)")


@rules.command("enable")
@click.argument("rule_id")
@click.option("--force", is_flag=True, help="enable it even though it cannot fire yet")
@url_option
@json_option
@click.pass_obj
def rules_enable(
    settings: Settings, rule_id: str, force: bool, url: str | None, as_json: bool
) -> None:
    """Enable a rule: its schedules and event triggers run it again. A rule that cannot fire
    (see `rules show`) is refused with the setup error unless --force."""
    _switch(settings, rule_id, "enable", url, as_json, force)


@rules.command("disable")
@click.argument("rule_id")
@url_option
@json_option
@click.pass_obj
def rules_disable(settings: Settings, rule_id: str, url: str | None, as_json: bool) -> None:
    """Disable a rule: its schedules and event triggers stop running it (manual runs still may)."""
    _switch(settings, rule_id, "disable", url, as_json)


@rules.command("versions")
@click.argument("rule_id")
@click.option("--limit", type=click.IntRange(1, 500), default=20, show_default=True)
@url_option
@json_option
@click.pass_obj
def rules_versions(
    settings: Settings, rule_id: str, limit: int, url: str | None, as_json: bool
) -> None:
    """A rule's version history, newest first (also of a deleted rule)."""
    page = Api(settings, url).call(
        "GET", f"/api/v1/rules/{rule_id}/versions", params={"limit": limit}
    )
    if as_json:
        _echo_json(page)
        return
    for item in page["items"]:
        where = item["source_file"] or item["source"]
        click.echo(
            f"v{item['version']:<4} {item['changed_at'][:19]}  {item['change']:<8} "
            f"{item['content_hash'][:12]}  {item['changed_by']}  ({where})"
        )
    if page["next_cursor"]:
        click.echo("(more: raise --limit)")


@main.command("usage")
@click.option("--billing-code", help="only this billing code")
@click.option(
    "--since", type=click.DateTime(["%Y-%m-%d"]), help="first UTC day (YYYY-MM-DD), inclusive"
)
@click.option(
    "--until", type=click.DateTime(["%Y-%m-%d"]), help="last UTC day (YYYY-MM-DD), inclusive"
)
@click.option("--limit", type=click.IntRange(1, 5000), default=500, show_default=True)
@url_option
@json_option
@click.pass_obj
def usage(
    settings: Settings,
    billing_code: str | None,
    since: datetime | None,
    until: datetime | None,
    limit: int,
    url: str | None,
    as_json: bool,
) -> None:
    """Usage per billing code and UTC day (run time, agent tokens, cost) with totals."""
    params: dict[str, object] = {"limit": limit}
    if billing_code is not None:
        params["billing_code"] = billing_code
    for name, value in (("since", since), ("until", until)):
        if value is not None:
            params[name] = date.isoformat(value.date())
    page = Api(settings, url).call("GET", "/api/v1/usage", params=params)
    if as_json:
        _echo_json(page)
        return
    click.echo(f"{'day':<10}  {'billing code':<32} {'run s':>10} {'tokens':>12} {'cost $':>10}")
    for item in page["items"]:
        click.echo(
            f"{item['day']:<10}  {item['billing_code']:<32} {item['run_seconds']:>10.1f} "
            f"{item['tokens']:>12} {item['cost_usd']:>10.4f}"
        )
    totals = page["totals"]
    click.echo(
        f"{'total':<10}  {'':<32} {totals['run_seconds']:>10.1f} {totals['tokens']:>12} "
        f"{totals['cost_usd']:>10.4f}"
    )
    if page["next_cursor"]:
        click.echo("(more rows: raise --limit or narrow --since/--until; totals cover them all)")


@rules.command("pause")
@click.argument("rule_id")
@click.option("--note", required=True, help="Why; every skipped slot records it.")
@click.option(
    "--trigger", "trigger_index", type=int, default=None, help="Only this trigger (from 0)."
)
@by_option
@url_option
@json_option
@click.pass_obj
def rules_pause(
    settings: Settings,
    rule_id: str,
    note: str,
    trigger_index: int | None,
    by: str,
    url: str | None,
    as_json: bool,
) -> None:
    """Pause a rule's schedules and event triggers (or one trigger): their slots are recorded
    skipped with the note; a running run finishes; manual runs still start."""
    body = {"note": note, "trigger_index": trigger_index, "by": by or ""}
    result = Api(settings, url).call("POST", f"/api/v1/rules/{rule_id}/pause", json=body)
    if as_json:
        _echo_json(result)
        return
    click.echo(result["message"])


@rules.command("resume")
@click.argument("rule_id")
@click.option("--trigger", "trigger_index", type=int, default=None, help="Only this trigger.")
@by_option
@url_option
@json_option
@click.pass_obj
def rules_resume(
    settings: Settings,
    rule_id: str,
    trigger_index: int | None,
    by: str,
    url: str | None,
    as_json: bool,
) -> None:
    """Resume a paused rule (or one paused trigger): its next slot fires again."""
    body = {"trigger_index": trigger_index, "by": by or ""}
    result = Api(settings, url).call("POST", f"/api/v1/rules/{rule_id}/resume", json=body)
    if as_json:
        _echo_json(result)
        return
    click.echo(result["message"])
