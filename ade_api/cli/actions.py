"""`ade-tasks actions list`: what a rule's chain can call, as the cluster's API reports it
(`GET /api/v1/actions`): the `ade-action` allow-list with each action's arguments and the rules
that may call it, and the built-in step types with their fields. `--local` reads this install's
own catalog instead, without an API (the cluster may run another version)."""

from __future__ import annotations

import json

import click

from ade_api.cli.root import Api, json_option, main, url_option
from ade_tasks.json_document import JsonObject
from ade_tasks.settings import Settings

ORIGIN_WORDS = {
    "rules-dir": "the rules directory",
    "shared": "trusted shared config",
    "api": "rules created through the API",
}


@main.group()
def actions() -> None:
    """The ade-action allow-list and the built-in step types."""


@actions.command("list")
@url_option
@json_option
@click.option("--local", is_flag=True, help="this install's catalog, without asking the API")
@click.pass_obj
def actions_list(settings: Settings, url: str | None, as_json: bool, local: bool) -> None:
    """List the ade-actions (arguments, which rules may call each) and the step types (fields)."""
    catalog = _local_catalog() if local else Api(settings, url).call("GET", "/api/v1/actions")
    if as_json:
        click.echo(json.dumps(catalog, indent=2))
        return
    for line in catalog_lines(catalog):
        click.echo(line)


def catalog_lines(catalog: JsonObject) -> list[str]:
    """The catalog in words, an action or step type per paragraph."""
    lines = ["ade-actions (a step `type: ade-action` with `action: NAME` and `args:`):"]
    for action in catalog["ade_actions"]:
        lines.append(f"  {action['name']:<22} {action['description']}")
        origins = ", ".join(ORIGIN_WORDS.get(o, o) for o in action["rule_origins"])
        flags = ["admin-only"] if action["admin_only"] else []
        flags += ["read-only: runs before a require_human approval"] * action["side_effect_free"]
        lines.append(f"  {'':<22} who may call it: {origins}" + "".join(f"; {f}" for f in flags))
        lines += [f"  {'':<22} args.{line}" for line in map(_parameter, action["arguments"])]
        secret = action["secret_args"]
        if secret:
            lines.append(f"  {'':<22} write {', '.join(secret)} as ${{env:NAME}}, never literally")
    lines.append("")
    lines.append("step types (`execution.actions[].type`):")
    for step in catalog["step_types"]:
        lines.append(f"  {step['type']:<22} {step['description']}")
        lines += [f"  {'':<22} {line}" for line in map(_parameter, step["fields"])]
    common = ", ".join(field["name"] for field in catalog["common_step_fields"])
    lines.append(f"every step also has: {common}")
    return lines


def _parameter(field: JsonObject) -> str:
    """`name: description; type, required or its default, limits`."""
    parts = [field["type"]]
    if field["required"]:
        parts.append("required")
    elif field["default"] not in (None, "", [], {}):
        parts.append(f"default {json.dumps(field['default'])}")
    parts += field["limits"]
    described = f"{field['description']}; " if field["description"] else ""
    return f"{field['name']}: {described}{', '.join(parts)}"


def _local_catalog() -> JsonObject:
    from ade_tasks.rules.action_reference import catalog

    return catalog()
