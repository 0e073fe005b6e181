"""`ade-tasks providers`: which LLM providers and agent CLIs this machine can use, and how to
fix the ones it cannot. Local only, unless `--check` is given: then one real, cheap call per
configured provider proves it logs in (`ade_workers.agents.provider_check`)."""

from __future__ import annotations

import json
import os

import click

from ade_api.cli.base import json_option, main
from ade_tasks.env_file import environment_with_env_file
from ade_tasks.settings import Settings
from ade_workers.agents.cli.facts import ProviderStatus, providers_report


def _line(status: ProviderStatus) -> str:
    state = "ready" if status.ready else "not ready"
    where = status.binary or status.base_url or "-"
    version = f" ({status.version})" if status.version else ""
    return (
        f"{status.name:<12} {state:<10} credentials: {status.credentials or 'none':<28} "
        f"{where}{version}"
    )


@main.command("providers")
@json_option
@click.option(
    "--check",
    is_flag=True,
    help="Make one real, cheap call to each configured provider and say what failed.",
)
@click.option("--model", default=None, help="The model the CLI checks ask (claude-code and codex).")
def providers(as_json: bool, check: bool, model: str | None) -> None:
    """Show provider credentials (by name, never values), base URLs and installed agent CLIs."""
    report = providers_report(environment_with_env_file(os.environ))
    if not check:
        if as_json:
            click.echo(json.dumps([status.as_dict() for status in report], indent=2))
            return
        for status in report:
            click.echo(_line(status))
            for fix in status.fixes:
                click.echo(f"{'':<12} fix: {fix}")
        return
    # Only `--check` needs the agent sessions (sqlalchemy and the CLI drivers): importing them
    # here keeps every other command's start-up at half the time.
    from ade_workers.agents.provider_check import check_provider

    settings = Settings()
    checked = []
    for status in report:
        if not status.ready:
            checked.append({**status.as_dict(), "check": "skipped: not configured"})
            if not as_json:
                click.echo(f"{status.name:<12} skipped: not configured ({'; '.join(status.fixes)})")
            continue
        if not as_json:
            click.echo(f"{status.name:<12} checking (one real call) ...", nl=False)
        result = check_provider(status.name, settings, model=model)
        verdict = "ok" if result.ok else "failed"
        checked.append({**status.as_dict(), "check": verdict, "detail": result.detail})
        if not as_json:
            click.echo(f" {verdict} in {result.seconds:.1f}s: {result.detail}")
    if as_json:
        click.echo(json.dumps(checked, indent=2))
    if any(item["check"] == "failed" for item in checked):
        raise SystemExit(1)
