"""`ade-tasks cron "EXPR"`: the next fires of any cron expression, with the evaluator the beats
use, without a rule, a database or a server; or why the expression is refused and what to write.

It imports only the schedule grammar and evaluator (no pydantic, SQLAlchemy or Celery), so it
answers as fast as the interpreter starts."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import click

from ade_api.cli.root import fail, json_option, main
from ade_tasks.json_document import JsonObject


@main.command("cron")
@click.argument("expression")
@click.option("--tz", "timezone", default="UTC", show_default=True, help="IANA time zone")
@click.option("--from", "start", help="list fires after this time (Z or an offset; default: now)")
@click.option("-n", "count", type=click.IntRange(1, 1000), default=10, show_default=True)
@click.option("--day-match", type=click.Choice(["any", "all"]), help="the day rule")
@click.option(
    "--dst-gap", type=click.Choice(["skip", "shift"]), help="a local time that is skipped"
)
@click.option(
    "--dst-repeat", type=click.Choice(["first", "last", "both"]), help="a local time twice"
)
@json_option
def cron(
    expression: str,
    timezone: str,
    start: str | None,
    count: int,
    day_match: str | None,
    dst_gap: str | None,
    dst_repeat: str | None,
    as_json: bool,
) -> None:
    """Preview EXPRESSION's next fires (local time and UTC; daylight-saving moves marked) as a
    schedule trigger with these options would fire them, or say why it is refused."""
    from ade_tasks.cron.evaluator import Evaluator
    from ade_tasks.cron.grammar import parse_cron
    from ade_tasks.errors import AdeError

    after = _after(start)
    try:
        evaluator = Evaluator(parse_cron(expression), timezone, day_match, dst_gap, dst_repeat)
        fires = []
        moment = after
        for _ in range(count):
            moment = evaluator.next_after(moment)
            fires.append((moment, evaluator.dst_note(moment)))
    except AdeError as exc:
        if as_json:
            click.echo(json.dumps({"cron": expression, "error": exc.message}, indent=2))
            raise SystemExit(1) from None
        fail(exc.message, code=1)
    chosen = {"day_match": day_match, "dst_gap": dst_gap, "dst_repeat": dst_repeat}
    policy = {
        "day_match": evaluator.day_match,
        "dst_gap": evaluator.dst_gap,
        "dst_repeat": evaluator.dst_repeat,
    }
    if as_json:
        answer: JsonObject = {"cron": expression, "timezone": timezone, **policy}
        answer["fires"] = [
            {"utc": t.isoformat(), "local": t.astimezone(evaluator.zone).isoformat(), "dst": note}
            for t, note in fires
        ]
        click.echo(json.dumps(answer, indent=2))
        return
    options = ", ".join(
        f"{name}: {value}{'' if chosen[name] else ' (default)'}" for name, value in policy.items()
    )
    click.echo(f"cron {expression!r} in {timezone} ({options})")
    for moment, note in fires:
        local = moment.astimezone(evaluator.zone)
        line = f"  {local:%Y-%m-%d %H:%M %a} {local.tzname():<6} {moment:%Y-%m-%d %H:%M}Z"
        click.echo(f"{line}  {note}" if note else line)


def _after(start: str | None) -> datetime:
    """The UTC minute to list fires after: `--from`, or now."""
    if start is None:
        moment = datetime.now(UTC)
    else:
        try:
            moment = datetime.fromisoformat(start.replace("z", "Z"))
        except ValueError:
            fail(
                f"--from {start!r} is not an ISO 8601 time; write e.g. 2026-03-29T00:00+01:00 "
                "or 2026-03-28T23:00Z"
            )
        if moment.tzinfo is None:
            fail(
                f"--from {start} has no time zone, so it would mean a different moment on every "
                f"machine; write it with Z or an offset, e.g. {start}Z or {start}+01:00"
            )
    return moment.astimezone(UTC).replace(second=0, microsecond=0)
