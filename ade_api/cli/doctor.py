"""`ade-tasks doctor`: check the cluster the settings name, a line per check with its verdict
and what to do when it fails (`ade_workers.doctor`). Each line starts as its check starts (some
wait on the network) and no check takes longer than `--timeout`. Exit 0 when nothing failed
(warnings and skipped checks included), 1 otherwise."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import click

from ade_api.cli.root import FAILURE, json_option, main

if TYPE_CHECKING:
    from ade_workers.doctor.check import Check, CheckResult

NAME_WIDTH = 10
VERDICT_WIDTH = 5


@main.command("doctor")
@json_option
@click.option(
    "--timeout",
    type=click.FloatRange(0.5, 300),
    default=10.0,
    show_default=True,
    help="seconds each check may take before it counts as failed",
)
def doctor(as_json: bool, timeout: float) -> None:
    """Check settings, database and schema, broker, workers per queue, beats, providers, the
    GitHub token and its scopes, and the sandbox; say what to do about each failure."""
    # The checks reach the database, Celery and the agent layers: imported only when run.
    from ade_workers.doctor.check import Verdict, run_checks
    from ade_workers.doctor.checks import CHECKS, load_probe

    def starting(check: Check) -> None:
        click.echo(f"{check.name:<{NAME_WIDTH}} ", nl=False)

    results = []
    for result in run_checks(CHECKS, load_probe(timeout), None if as_json else starting):
        results.append(result)
        if not as_json:
            for line in result_lines(result):
                click.echo(line)
    failed = [result for result in results if result.verdict == Verdict.FAIL]
    if as_json:
        click.echo(json.dumps([result.as_dict() for result in results], indent=2))
    elif failed:
        names = ", ".join(result.name for result in failed)
        click.echo(f"{len(failed)} of {len(results)} checks failed: {names}")
    else:
        click.echo(f"all {len(results)} checks passed")
    if failed:
        raise SystemExit(FAILURE)


def result_lines(result: CheckResult) -> list[str]:
    """The rest of a check's line (after its name), and a `fix:` line when there is a fix."""
    lines = [f"{result.verdict.value:<{VERDICT_WIDTH}} {result.detail}"]
    if result.fix and result.verdict.value in ("fail", "warn"):
        lines.append(f"{'':<{NAME_WIDTH}} {'':<{VERDICT_WIDTH}} fix: {result.fix}")
    return lines
