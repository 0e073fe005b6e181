"""`ade-tasks rules push DIR`: a rules directory deployed through the HTTP API with an admin
token (a team's CI, no database access), as one versioned change or not at all.

The push compares first (a dry run, printed as a diff), then applies what it compared against
that state's revision: a push or sync applied in between makes the API refuse it (409) rather
than undo the other change unseen; running the push again compares with the new state.
What a push does to rules the directory does not hold: `ade_tasks.rule_files.push`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import click

from ade_api.cli.root import Api, by_option, counted, fail, json_option, rules, url_option
from ade_tasks.json_document import JsonObject
from ade_tasks.settings import Settings

PUSH = "/api/v1/rules/push"
#: A push of a big directory may take longer than the client's usual 30 s.
PUSH_TIMEOUT = 300


def read_directory(directory: Path) -> tuple[list[dict[str, str]], list[str]]:
    """The rules files under `directory` as the API takes them (path under it, text), and the
    problems of those that cannot be read as text (`file:(file): reason`)."""
    from ade_tasks.rules.loader import rule_files

    files: list[dict[str, str]] = []
    problems: list[str] = []
    for path, _ in rule_files(directory):
        relative = Path(os.path.relpath(path, directory)).as_posix()
        try:
            text = Path(path).read_bytes().decode("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            problems.append(f"{path}:(file): cannot read as UTF-8 text: {exc}")
            continue
        files.append({"path": relative, "text": text})
    return files, problems


def _label(directory: str) -> str:
    """The pushed directory's name as its rules' file names start with it (`config/rules`)."""
    name = Path(os.path.normpath(directory)).as_posix()
    return "" if name == "." else name


def _post(api: Api, body: JsonObject) -> JsonObject:
    """The API's answer to a push; a directory with problems prints every one and exits 1."""
    response = api.send("POST", PUSH, json=body, timeout=PUSH_TIMEOUT)
    if response.status_code == 422 and "errors" in response.json():
        for problem in response.json()["errors"]:
            click.echo(f"{problem['file']}:{problem['field']}: {problem['reason']}", err=True)
        fail(
            f"{counted(len(response.json()['errors']), 'problem')} in the pushed rules; nothing "
            "was applied (`ade-tasks rules validate DIR` checks them without the API)",
            code=1,
        )
    answer: JsonObject = api.answer(response, "POST", PUSH)
    return answer


def _print_plan(plan: JsonObject) -> None:
    for sign, kind in (("+", "added"), ("~", "updated"), ("-", "removed")):
        for rule_id in plan[kind]:
            click.echo(f"{sign} {kind:<8} {rule_id}")
    if plan["unchanged"]:
        click.echo(f"  {counted(len(plan['unchanged']), 'rule')} unchanged")
    for rule_id, diff in plan["diffs"].items():
        click.echo(f"\n{rule_id}:")
        click.echo(diff.rstrip("\n"))


def _changes(plan: JsonObject) -> str:
    return ", ".join(f"{len(plan[kind])} {kind}" for kind in ("added", "updated", "removed"))


@rules.command("push")
@click.argument("directory")
@click.option(
    "--dry-run", is_flag=True, help="Print what the push would change (a diff); change nothing."
)
@by_option
@url_option
@json_option
@click.pass_obj
def rules_push(
    settings: Settings, directory: str, dry_run: bool, by: str | None, url: str | None,
    as_json: bool,
) -> None:  # fmt: skip
    """Deploy a rules DIRECTORY through the API (an admin token, no database access): its
    `*.yaml`/`*.yml` files are validated as `rules sync` validates them and applied as one
    versioned change, or, with a problem in any file, not at all (every problem is listed).
    File rules the directory does not hold are removed; rules created through the API stay."""
    if not Path(directory).is_dir():
        fail(f"{directory} is not a directory; give the rules directory of your checkout")
    files, unreadable = read_directory(Path(directory))
    api = Api(settings, url)
    body: JsonObject = {"directory": _label(directory), "files": files, "by": by}
    for problem in unreadable:
        click.echo(problem, err=True)
    plan = _post(api, {**body, "dry_run": True})
    if unreadable:
        fail(f"{counted(len(unreadable), 'file')} could not be read; nothing was applied", code=1)
    changes = any(plan[kind] for kind in ("added", "updated", "removed"))
    if dry_run or not changes:
        if as_json:
            click.echo(json.dumps(plan, indent=2))
            return
        _print_plan(plan)
        if not changes:
            click.echo(f"nothing to push: the cluster's file rules match {directory}")
        else:
            click.echo(f"dry run ({_changes(plan)}); nothing was applied")
        return
    if not as_json:
        _print_plan(plan)
    done = _post(api, {**body, "base": plan["base"]})
    if as_json:
        click.echo(json.dumps(done, indent=2))
        return
    click.echo(
        f"pushed {directory}: {_changes(done)}, {len(done['unchanged'])} unchanged "
        f"(file rules at revision {done['revision']})"
    )
