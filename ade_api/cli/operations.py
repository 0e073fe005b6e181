"""CLI commands for what operators look after: pending inputs (approvals), the review queue,
lanes and scheduled cleanups. Each is a thin call of the HTTP API (see `ade_api.cli.Api`)."""

from __future__ import annotations

import json
from collections.abc import Callable

import click

from ade_api.cli.root import Api, by_option, json_option, main, runs, url_option
from ade_api.cli.step_lines import approval_line
from ade_tasks.json_document import JsonObject
from ade_tasks.runs.review import QUEUE_ACTIONS
from ade_tasks.settings import Settings
from ade_tasks.states import Answer


def _echo(
    data: JsonObject | list[JsonObject], as_json: bool, line: Callable[[JsonObject], str]
) -> None:
    if as_json:
        click.echo(json.dumps(data, indent=2))
        return
    items = data if isinstance(data, list) else [data]
    for item in items:
        click.echo(line(item))
    if isinstance(data, list) and not data:
        click.echo("(none)")


def _run_line(item: JsonObject) -> str:
    confidence = "-" if item["confidence"] is None else f"{item['confidence']:.2f}"
    return (
        f"{item['id']}  {item['status']:<10} {item['queue_status'] or '-':<22} "
        f"confidence {confidence}  {item['rule_id']}"
    )


def _decision_command(verb: str, effect: str) -> None:
    """`runs approve` / `runs reject`: the same call with a different verb."""

    @runs.command(verb, help=f"{verb.capitalize()} a run waiting for a human (by id or unique "
                  f"id prefix): {effect}.")  # fmt: skip
    @click.argument("run_id")
    @by_option
    @click.option("--note", help="why (kept with the run)")
    @url_option
    @json_option
    @click.pass_obj
    def decide(
        settings: Settings,
        run_id: str,
        by: str | None,
        note: str | None,
        url: str | None,
        as_json: bool,
    ) -> None:
        api = Api(settings, url)
        path = f"/api/v1/runs/{api.run_id(run_id)}/{verb}"
        item = api.call("POST", path, json={"by": by, "note": note})
        _echo(item, as_json, _run_line)
        if item["status"] == "waiting" and not as_json:  # a gate that needs more approvals
            detail = api.call("GET", f"/api/v1/runs/{item['id']}")
            for approval in detail["approvals"]:
                if approval["status"] == "pending":
                    click.echo(f"  {approval_line(approval)}")


_decision_command("approve", "it resumes where it stopped")
_decision_command("reject", "it ends cancelled")


@main.group()
def inputs() -> None:
    """Pending inputs: agents' tool calls and gates waiting for an operator's answer."""


def _input_line(item: JsonObject) -> str:
    if item.get("kind") == "question":
        what = f"question: {str((item['arguments'] or {}).get('question', ''))[:200]}"
    elif item["tool"]:
        what = f"tool {item['tool']}"
    else:
        what = f"gate before step {item['step_index'] + 1}"
    answered = f" -> {item['answer']} by {item['decided_by']}" if item["answer"] else ""
    expires = f" (declined at {item['expires_at'][:19]})" if item["expires_at"] else ""
    args = (
        f"\n        {json.dumps(item['arguments'])[:200]}"
        if item["arguments"] and item.get("kind") != "question"
        else ""
    )
    return (
        f"{item['id']:>6}  {item['status']:<9} run {item['run_id']}  {what}{answered}{expires}"
        f"{args}"
    )


@inputs.command("list")
@click.option("--status", default="pending", show_default=True,
              help="pending | approved | rejected | cancelled")  # fmt: skip
@url_option
@json_option
@click.pass_obj
def inputs_list(settings: Settings, status: str, url: str | None, as_json: bool) -> None:
    """Inputs runs wait for, newest first."""
    rows = Api(settings, url).call("GET", "/api/v1/inputs", params={"status": status})
    _echo(rows, as_json, _input_line)


@inputs.command("answer")
@click.argument("input_id", type=int)
@click.argument("answer", type=click.Choice([a.value for a in Answer]))
@by_option
@click.option("--note", help="why (kept with the run); for a question, the answer the agent gets")
@url_option
@json_option
@click.pass_obj
def inputs_answer(
    settings: Settings,
    input_id: int,
    answer: str,
    by: str | None,
    note: str | None,
    url: str | None,
    as_json: bool,
) -> None:
    """Answer a pending input: accept, accept_for_session (the tool runs without asking for
    the rest of the session), decline (the agent is told no) or cancel (the run ends)."""
    body = {"answer": answer, "by": by, "note": note}
    item = Api(settings, url).call("POST", f"/api/v1/inputs/{input_id}/answer", json=body)
    if as_json:
        click.echo(json.dumps(item, indent=2))
        return
    click.echo(_input_line(item["input"]))
    click.echo(_run_line(item["run"]))


@main.group()
def review() -> None:
    """The review queue of finished runs."""


@review.command("list")
@click.option("--status", default="pending-review", show_default=True, help="queue status")
@click.option("--limit", type=click.IntRange(1, 500), default=50, show_default=True)
@url_option
@json_option
@click.pass_obj
def review_list(
    settings: Settings, status: str, limit: int, url: str | None, as_json: bool
) -> None:
    """Runs in one review-queue status, newest first."""
    page = Api(settings, url).call(
        "GET", "/api/v1/runs", params={"queue_status": status, "limit": limit}
    )
    _echo(page["items"], as_json, _run_line)


@review.command("move")
@click.argument("action", type=click.Choice(sorted(QUEUE_ACTIONS)))
@click.argument("run_id")
@url_option
@json_option
@click.pass_obj
def review_move(
    settings: Settings, action: str, run_id: str, url: str | None, as_json: bool
) -> None:
    """Ignore, archive or approve a run (by id or unique id prefix) in the review queue."""
    api = Api(settings, url)
    item = api.call("POST", f"/api/v1/runs/{api.run_id(run_id)}/review", json={"action": action})
    _echo(item, as_json, _run_line)


@main.group()
def lanes() -> None:
    """Lanes: git worktrees created by runs."""


@lanes.command("list")
@click.option("--status", default="active", show_default=True, help="active | deleted")
@url_option
@json_option
@click.pass_obj
def lanes_list(settings: Settings, status: str, url: str | None, as_json: bool) -> None:
    """Lanes, newest first."""
    rows = Api(settings, url).call("GET", "/api/v1/lanes", params={"status": status})
    _echo(rows, as_json, lambda r: f"{r['name']:<32} {r['branch']:<40} {r['status']}  {r['path']}")


@main.group()
def cleanups() -> None:
    """Scheduled lane deletions (delete-lane with after_minutes)."""


def _cleanup_line(row: JsonObject) -> str:
    return f"{row['id']:>6}  {row['status']:<10} due {row['due_at'][:19]}  lane {row['lane_id']}"


@cleanups.command("list")
@click.option("--status", help="scheduled | executing | done | failed | cancelled")
@url_option
@json_option
@click.pass_obj
def cleanups_list(settings: Settings, status: str | None, url: str | None, as_json: bool) -> None:
    """Scheduled cleanups, soonest first."""
    params = {"status": status} if status else {}
    _echo(Api(settings, url).call("GET", "/api/v1/cleanups", params=params), as_json, _cleanup_line)


@cleanups.command("cancel")
@click.argument("cleanup_id", type=int)
@url_option
@json_option
@click.pass_obj
def cleanups_cancel(settings: Settings, cleanup_id: int, url: str | None, as_json: bool) -> None:
    """Cancel a scheduled cleanup; the lane stays."""
    row = Api(settings, url).call("POST", f"/api/v1/cleanups/{cleanup_id}/cancel")
    _echo(row, as_json, _cleanup_line)
