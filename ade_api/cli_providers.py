"""`ade-tasks providers`: which LLM providers and agent CLIs this machine can use, and how to
fix the ones it cannot. Local only: no API call, no network."""

from __future__ import annotations

import json
import os

import click

from ade_api.cli import json_option, main
from ade_workers.agents.cli_agents import ProviderStatus, providers_report


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
def providers(as_json: bool) -> None:
    """Show provider credentials (by name, never values), base URLs and installed agent CLIs."""
    report = providers_report(os.environ)
    if as_json:
        click.echo(json.dumps([status.as_dict() for status in report], indent=2))
        return
    for status in report:
        click.echo(_line(status))
        for fix in status.fixes:
            click.echo(f"{'':<12} fix: {fix}")
