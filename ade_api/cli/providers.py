"""`ade-tasks providers`: which LLM providers and agent CLIs this machine can use, and how to
fix the ones it cannot. Local only, unless `--check` is given: then one real, cheap call per
configured provider proves it logs in (`ade_workers.agents.provider_check`)."""

from __future__ import annotations

import json
import os

import click
import httpx

from ade_api.cli.root import Api, json_option, main, url_option
from ade_tasks.env_file import environment_with_env_file
from ade_tasks.json_document import JsonObject
from ade_tasks.settings import Settings
from ade_workers.agents.readiness import ProviderStatus, providers_report

CLUSTER_VIEW = "/api/v1/cluster/view"
#: A shell with no cluster must not wait long to be told so.
CLUSTER_TIMEOUT = 5


def _print_statuses(report: list[ProviderStatus]) -> None:
    for status in report:
        click.echo(_line(status))
        for fix in status.fixes:
            click.echo(f"{'':<12} fix: {fix}")


def cluster_view(settings: Settings, url: str | None) -> tuple[JsonObject | None, str]:
    """The cluster's own view (`GET /api/v1/cluster/view`) and the API's address; or None and
    why it could not be had (a CLI without a cluster still shows its own view)."""
    api = Api(settings, url)
    try:
        response = api.client.get(CLUSTER_VIEW, timeout=CLUSTER_TIMEOUT)
    except httpx.HTTPError as exc:
        return None, f"no API answered at {api.base} ({exc}); set ADE_API_URL or pass --url"
    if response.status_code != 200:
        try:
            detail = response.json().get("detail", response.text)
        except ValueError:
            detail = response.text
        return None, (
            f"the API at {api.base} answered {response.status_code} ({detail}); set "
            "ADE_API_TOKEN to a viewer token"
        )
    view: JsonObject = response.json()
    return view, api.base


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
@click.option("--local", is_flag=True, help="Only this shell's view; do not ask the cluster's API.")
@url_option
@click.pass_obj
def providers(
    settings: Settings, as_json: bool, check: bool, model: str | None, local: bool, url: str | None
) -> None:
    """Show provider credentials (by name, never values), base URLs and installed agent CLIs,
    as this shell sees them and as the cluster's API does (`--local`: this shell only)."""
    report = providers_report(environment_with_env_file(os.environ))
    if not check:
        view, why = (None, "not asked (--local)") if local else cluster_view(settings, url)
        if as_json:
            shown = {
                "local": [status.as_dict() for status in report],
                "cluster": None if view is None else view["providers"],
                "cluster_error": None if view else why,
            }
            click.echo(json.dumps(shown, indent=2))
            return
        click.echo("this shell (its own ADE_PROVIDERS__* and PATH):")
        _print_statuses(report)
        if local:
            return
        if view is None:
            click.echo(f"the cluster: {why}")
            return
        click.echo(f"the cluster (as its API at {why} sees it; rule health judges by this):")
        theirs = [
            ProviderStatus(**{**item, "fixes": tuple(item["fixes"])}) for item in view["providers"]
        ]
        _print_statuses(theirs)
        ours = {status.name: status.ready for status in report}
        for status in theirs:
            if status.ready and not ours.get(status.name, False):
                click.echo(
                    f"note: {status.name} is ready in the cluster but not in this shell: runs "
                    "use the cluster's settings; this shell's matter only for commands run here"
                )
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


@main.command("settings")
@click.option("--local", is_flag=True, help="Only this shell's settings; do not ask the API.")
@url_option
@json_option
@click.pass_obj
def settings_command(settings: Settings, local: bool, url: str | None, as_json: bool) -> None:
    """The settings that differ from their defaults (by `ADE_*` name, secrets as `(set)`), in
    this shell and in the cluster's API, side by side; `*` marks a setting they disagree on."""
    from ade_tasks.settings_view import settings_view

    ours = settings_view(settings)
    view, why = (None, "not asked (--local)") if local else cluster_view(settings, url)
    theirs: dict[str, str] | None = None if view is None else view["settings"]
    if as_json:
        click.echo(
            json.dumps(
                {"local": ours, "cluster": theirs, "cluster_error": None if view else why},
                indent=2,
            )
        )
        return
    if theirs is None:
        if not ours:
            click.echo("every setting at its default")
        for name, value in ours.items():
            click.echo(f"{name:<40} {value}")
        if not local:
            click.echo(f"the cluster: {why}")
        return
    click.echo(f"{'setting':<40}   {'this shell':<36} the cluster (API at {why})")
    for name in sorted({*ours, *theirs}):
        here, there = ours.get(name, "(default)"), theirs.get(name, "(default)")
        mark = "*" if here != there else " "
        click.echo(f"{name:<40} {mark} {here:<36} {there}")
