"""The `ade-tasks` root group, its shared options and the HTTP API client every command uses
(`Api`, `fail`, `json_option`, `url_option`), and the commands that need nothing more (serve,
worker, beat, dev, db). The other commands live beside it, one module per group."""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Iterable, Mapping
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, Protocol

import click

from ade_api.cli import registry

if TYPE_CHECKING:
    import httpx

    from ade_api.cli.plain_http import Response
    from ade_tasks.api_address import ApiAddress
    from ade_tasks.rules.loader import LoadedRule
    from ade_tasks.settings import Settings

#: Exit codes: USAGE when the command line or the CLI's set-up must change (an argument, an
#: ambiguous run id prefix, a missing or invalid token); FAILURE when what was asked failed or
#: was refused (no such run, the API unreachable or saying no, a run that did not succeed).
USAGE, FAILURE = 2, 1


def counted(count: int, noun: str) -> str:
    """`1 problem`, `2 problems`: a count with its noun."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def fail(message: str, code: int = USAGE) -> NoReturn:
    """Print one `error:` line and exit; the message says what was wrong and what to do."""
    click.echo(f"error: {' '.join(message.split())}", err=True)
    sys.exit(code)


# `-h` everywhere: context settings are inherited by every subcommand's context. What a command
# needs beyond click (settings, httpx, the domain) is imported when it runs, so `--version`
# imports none of it (tests/unit/ade_api/cli/test_registry.py, bench/cli_startup.py).
@click.group(
    cls=registry.LazyGroup,
    lazy_commands=registry.ROOT,
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.version_option(package_name="ade-tasks", prog_name="ade-tasks")
@click.pass_context
def main(ctx: click.Context) -> None:
    """ADE Tasks: automations and agent runs on Celery."""
    if ctx.invoked_subcommand in registry.ADDRESS_ONLY:
        return  # that group gives its commands what they need (`settings_or_address`)
    ctx.obj = _settings(ctx)


def _settings(ctx: click.Context) -> Settings | None:
    """The settings, or one `error:` line naming every setting that does not load."""
    from ade_tasks.settings import get_settings

    try:
        return get_settings()
    except ValueError as exc:  # pydantic's ValidationError, pydantic-settings' SettingsError
        if ctx.invoked_subcommand == "doctor":
            return None  # the doctor reports bad settings as its first check
        _settings_fail(exc)


def _settings_fail(exc: ValueError) -> NoReturn:
    from ade_workers.doctor.check import settings_problems

    fail(f"the settings do not load: {'; '.join(settings_problems(exc))}")


def settings_or_address(ctx: click.Context, group: str) -> Settings | ApiAddress | None:
    """What the command `group` invokes is given: the API address alone, read without building
    the settings (ade_tasks/api_address.py), to a command that only calls the API
    (`registry.ADDRESS_ONLY`); the settings to every other."""
    if ctx.invoked_subcommand not in registry.ADDRESS_ONLY[group]:
        return _settings(ctx)
    from ade_tasks.api_address import ApiAddress

    try:
        return ApiAddress.from_environment()
    except ValueError as exc:
        _settings_fail(exc)


# --- database and rules (local) -----------------------------------------------------------


@main.group()
def db() -> None:
    """Database schema."""


@db.command("upgrade")
@click.pass_obj
def db_upgrade(settings: Settings) -> None:
    """Apply the migrations to ADE_DATABASE_URL (or the embedded SQLite file)."""
    from ade_tasks.db.engine import create_db_engine
    from ade_tasks.db.migrate import current_revision, upgrade

    engine = create_db_engine(settings.effective_database_url)
    click.echo(f"migrating {engine.url.render_as_string(hide_password=True)} ...")
    try:
        upgrade(engine)
    except Exception as exc:
        fail(f"migration failed: {exc}")
    click.echo(f"database at revision {current_revision(engine)}")


@main.group(cls=registry.LazyGroup, lazy_commands=registry.RULES)
def rules() -> None:
    """Validate, sync and list rules."""


def _rules_dir(settings: Settings, directory: str | None) -> Path:
    return Path(directory) if directory else settings.rules_dir


@rules.command("validate")
@click.argument("directory", required=False)
@click.pass_obj
def rules_validate(settings: Settings, directory: str | None) -> None:
    """Check every rule file; print each problem as `file:field: reason`."""
    from ade_tasks.rules.loader import load_rules_dir

    result = load_rules_dir(_rules_dir(settings, directory))
    for problem in result.problems:
        click.echo(str(problem), err=True)
    _warn_unconfigured_projects(settings, result.rules)
    _warn_unknown_routes(settings, result.rules)
    click.echo(
        f"{counted(len(result.rules), 'valid rule')} in {counted(result.files, 'file')}, "
        f"{counted(len(result.problems), 'problem')}"
    )
    sys.exit(1 if result.problems else 0)


@rules.command("sync")
@click.argument("directory", required=False)
@click.pass_obj
def rules_sync(settings: Settings, directory: str | None) -> None:
    """Load the rule files into the database (valid rules load even if others are broken)."""
    from ade_tasks.db.engine import create_db_engine, create_session_factory
    from ade_tasks.rule_files.sync import sync_rules_dir

    factory = create_session_factory(create_db_engine(settings.effective_database_url))
    loaded, report = sync_rules_dir(factory, _rules_dir(settings, directory))
    for problem in loaded.problems:
        click.echo(str(problem), err=True)
    _warn_unconfigured_projects(settings, loaded.rules)
    _warn_unknown_routes(settings, loaded.rules)
    click.echo(
        f"synced {len(loaded.rules)} rules: {len(report.added)} added, {len(report.updated)} "
        f"updated, {len(report.unchanged)} unchanged, {len(report.removed)} removed"
    )
    if loaded.problems and not report.removed:
        click.echo("(rules missing from the files were kept because some files have problems)")
    sys.exit(1 if loaded.problems else 0)


def _warn_unconfigured_projects(settings: Settings, rules: Iterable[LoadedRule]) -> None:
    """A warning per rule whose `project` these settings do not configure: the rule is valid
    (another host's settings may name the project), but here its runs would fail and rule
    health calls it not ready, so say so now rather than at the first run."""
    known = {"default", *settings.projects}
    for loaded in rules:
        project = str(loaded.stored()[0].get("project", "default"))  # no model needed
        if project not in known:
            click.echo(
                f"warning: rule {loaded.rule_id!r}: project {project!r} is not configured in "
                f"these settings (known: {', '.join(sorted(known))}); its runs fail until "
                f"ADE_PROJECTS__{project.upper()}=/path/to/repository is set where they run",
                err=True,
            )


def _warn_unknown_routes(settings: Settings, rules: Iterable[LoadedRule]) -> None:
    """A warning per rule whose `notify.routes` names a route these settings do not configure:
    valid (the cluster's settings may name it), but here those notifications go nowhere."""
    configured = settings.notifications.routes
    for loaded in rules:
        notify = loaded.stored()[0].get("notify")
        names = notify.get("routes", []) if isinstance(notify, dict) else []
        missing = [name for name in names if name not in configured]
        if missing:
            click.echo(
                f"warning: rule {loaded.rule_id!r}: notify.routes names {', '.join(missing)}, "
                f"which these settings do not configure (configured: "
                f"{', '.join(sorted(configured)) or 'none'}); set "
                "ADE_NOTIFICATIONS__ROUTES__<name>__URL where the cluster runs, or fix the rule",
                err=True,
            )


# --- the API client -----------------------------------------------------------------------

url_option = click.option("--url", help="API base URL (default: ADE_API_URL or the dev address)")
json_option = click.option("--json", "as_json", is_flag=True, help="print JSON for scripts")
by_option = click.option(
    "--by",
    default=None,
    help="who acts, if several people share the token (recorded after its name)",
)


class ApiTarget(Protocol):
    """Where the API is and what token to send: `Settings`, or an `ApiAddress` read alone."""

    @property
    def effective_api_url(self) -> str: ...

    @property
    def effective_api_token(self) -> str | None: ...

    @property
    def dev_token_file(self) -> Path: ...


#: Seconds a request may take, connecting and reading.
TIMEOUT = 30


class Api:
    """A small client of the HTTP API with actionable errors."""

    def __init__(self, settings: ApiTarget, url: str | None) -> None:
        self.base = (url or settings.effective_api_url).rstrip("/")
        token = settings.effective_api_token
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._sends_token = bool(token)
        self._token_file = settings.dev_token_file.absolute()

    @cached_property
    def client(self) -> httpx.Client:
        """The httpx client, made when first used: `get` and commands that call no API never
        import httpx."""
        import httpx

        # Plain http:// has no certificate to verify, and building the TLS context httpx
        # otherwise makes up front loads the CA bundle: a tenth of `runs list`'s start-up.
        verify = not self.base.startswith("http://")
        return httpx.Client(base_url=self.base, timeout=TIMEOUT, headers=self.headers,
                            verify=verify)  # fmt: skip

    def send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """The API's response, whatever its status; exits when the API cannot be reached."""
        import httpx

        try:
            return self.client.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            self._unreachable(exc)

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        """The API's JSON answer; exits with the API's reason when it says no."""
        return self.answer(self.send(method, path, **kwargs), method, path)

    def get(self, path: str, params: Mapping[str, object]) -> Any:
        """`call("GET", path, params=params)` through the standard library (ade_api/cli/
        plain_http.py): a command whose whole job is one GET starts without httpx."""
        from ade_api.cli.plain_http import plain_get

        try:
            response = plain_get(f"{self.base}{path}", params, self.headers, TIMEOUT)
        except OSError as exc:
            self._unreachable(exc)
        return self.answer(response, "GET", path)

    def _unreachable(self, exc: Exception) -> NoReturn:
        fail(
            f"cannot reach the ADE API at {self.base} ({exc}); start it with "
            "`ade-tasks dev` (or `ade-tasks api`) or point --url / ADE_API_URL at it",
            code=FAILURE,
        )

    def answer(self, response: Response, method: str, path: str) -> Any:
        """A response's JSON; exits with its reason (and what to do) when it is an error."""
        if response.status_code >= 400:
            try:
                detail = response.json().get("detail", response.text)
            except ValueError:
                detail = response.text
            if response.status_code == 401 and not self._sends_token:
                fail(
                    f"no API token to send to the ADE API at {self.base} ({method} {path} "
                    f"answered 401): ADE_API_TOKEN is not set and there is no "
                    f"{self._token_file}; set ADE_API_TOKEN to a token from `ade-tasks tokens "
                    "create`, or run the CLI in the directory where `ade-tasks dev` runs "
                    "(it writes its token to .ade/api-token there)",
                    code=USAGE,
                )
            if response.status_code == 401:
                fail(
                    f"the ADE API at {self.base} refused the token ({method} {path} answered "
                    f"401: {detail}); set "
                    "ADE_API_TOKEN to a token from `ade-tasks tokens create` (the dev stack "
                    "writes its own to .ade/api-token)",
                    code=USAGE,
                )
            fail(f"{method} {path} answered {response.status_code}: {detail}", code=FAILURE)
        return response.json()

    def run_id(self, given: str) -> str:
        """The full id of the run `given` names: its id, or a unique prefix of it (the short
        ids `runs list` and the web page show). Exits with a one-line error otherwise."""
        text = given.strip().lower()
        if not RUN_ID.fullmatch(text):
            fail(
                f"{given!r} is not a run id; give the id `ade-tasks runs list` shows (or its "
                "first characters)"
            )
        if len(text) == FULL_RUN_ID:
            return text  # the API says whether such a run exists
        page = self.call("GET", "/api/v1/runs", params={"id_prefix": text, "limit": SHOWN_MATCHES})
        matches = [run for run in page["items"] if run["id"].startswith(text)]
        if not matches:
            fail(
                f"no run id starts with {text!r}; `ade-tasks runs list` shows the runs",
                code=FAILURE,
            )
        if len(matches) > 1:
            more = " and more" if page["next_cursor"] else ""
            listed = ", ".join(
                f"{run['id'][: len(text) + 4]} ({run['rule_id']}, {run['queued_at'][:16]})"
                for run in matches
            )
            fail(
                f"run id prefix {text!r} is ambiguous: it matches {listed}{more}; give more "
                "characters of the id"
            )
        return str(matches[0]["id"])


#: What a run id (a UUID) or a prefix of one may contain.
RUN_ID = re.compile(r"[0-9a-f-]{1,36}")
FULL_RUN_ID = 36
#: How many runs an ambiguous prefix error names.
SHOWN_MATCHES = 5


@rules.command("list")
@url_option
@json_option
@click.pass_obj
def rules_list(settings: Settings, url: str | None, as_json: bool) -> None:
    """List the rules the cluster knows, and why each that cannot fire cannot."""
    from ade_api.cli.health import not_ready_lines, state_word

    items = Api(settings, url).call("GET", "/api/v1/rules")
    if as_json:
        click.echo(json.dumps(items, indent=2))
        return
    for rule in items:
        triggers = ",".join(t["type"] for t in rule["document"]["triggers"])
        click.echo(f"{rule['id']:<28} v{rule['version']:<3} {state_word(rule):<8} {triggers}")
        for line in not_ready_lines(rule):
            click.echo(f"{'':<28} {line}")


@rules.command("trust")
@click.argument("content_hash")
@click.option("--by", default=lambda: os.environ.get("USER", "cli"), help="who trusts it")
@click.pass_obj
def rules_trust(settings: Settings, content_hash: str, by: str) -> None:
    """Trust a reviewed shared rules file (by the sha256 `rules list` shows) so its rules run."""
    from ade_tasks.db.engine import create_db_engine, create_session_factory
    from ade_tasks.db.rule_trust import trust_hash
    from ade_tasks.errors import NotFoundError

    factory = create_session_factory(create_db_engine(settings.effective_database_url))
    try:
        with factory.begin() as session:
            released = trust_hash(session, content_hash, by)
    except NotFoundError as exc:
        fail(exc.message, code=1)
    click.echo(f"trusted {content_hash[:12]}: rules {', '.join(released)} may run now")


@rules.command("next")
@click.argument("rule_id")
@click.option("-n", "count", type=click.IntRange(1, 100), default=10, show_default=True)
@click.option(
    "--from", "start", help="list fire times after this time (Z or an offset; default: now)"
)
@url_option
@json_option
@click.pass_obj
def rules_next(
    settings: Settings,
    rule_id: str,
    count: int,
    start: str | None,
    url: str | None,
    as_json: bool,
) -> None:
    """Preview the next fire times of RULE_ID's schedules (trigger zone and UTC, with the fires a
    daylight-saving change moved or doubled marked), or the problem of a schedule that cannot
    fire (as the API and `rules show` report it). `ade-tasks cron` previews any expression."""
    params: dict[str, object] = {"count": count}
    if start is not None:
        params["from"] = start
    preview = Api(settings, url).call("GET", f"/api/v1/rules/{rule_id}/schedule", params=params)
    if as_json:
        click.echo(json.dumps(preview, indent=2))
        return
    if not preview["triggers"]:
        # With no trigger to name them on, problems are the rule's own (an unreadable document).
        for problem in preview.get("problems", []):
            click.echo(f"rule {rule_id}: problem: {problem}")
        if not preview.get("problems"):
            click.echo(f"rule {rule_id} has no schedule triggers")
    if not preview["enabled"]:
        click.echo(f"rule {rule_id} is disabled: these times will not fire until it is enabled")
    for trigger in preview["triggers"]:
        click.echo(
            f"trigger #{trigger['trigger_index']}: {trigger['cron']} ({trigger['timezone']})"
        )
        if trigger.get("problem"):
            click.echo(f"  problem: {trigger['problem']}")
        if trigger.get("paused"):
            click.echo(
                f"  paused: these times are skipped until it is resumed: {trigger['paused']}"
            )
        for fire in trigger["next"]:
            line = f"  {fire['local'][:16].replace('T', ' ')} local   {fire['utc'][:16]}Z"
            click.echo(f"{line}  {fire['dst']}" if fire.get("dst") else line)


@rules.command("occurrences")
@click.argument("rule_id")
@click.option("--limit", type=click.IntRange(1, 500), default=20, show_default=True)
@url_option
@json_option
@click.pass_obj
def rules_occurrences(
    settings: Settings, rule_id: str, limit: int, url: str | None, as_json: bool
) -> None:
    """What came of RULE_ID's past schedule occurrences (fired, skipped, missed)."""
    items = Api(settings, url).call(
        "GET", f"/api/v1/rules/{rule_id}/occurrences", params={"limit": limit}
    )
    if as_json:
        click.echo(json.dumps(items, indent=2))
        return
    for item in items:
        detail = item["run_id"] or item["reason"] or ""
        click.echo(f"{item['slot'][:16]}Z  #{item['trigger_index']}  {item['outcome']:<8} {detail}")


@main.group(cls=registry.LazyGroup, lazy_commands=registry.RUNS)
@click.pass_context
def runs(ctx: click.Context) -> None:
    """Run history."""
    ctx.obj = settings_or_address(ctx, "runs")


# --- the dev stack ----------------------------------------------------------------------


@main.command("dev")
@click.option("--port", type=int, default=None, help="API port (default ADE_API_PORT, 8787)")
@click.pass_obj
def dev(settings: Settings, port: int | None) -> None:
    """Run API, worker and beat in one process on SQLite and an in-memory broker."""
    from ade_api.cli.dev import run_dev

    if port is not None:
        settings = settings.model_copy(update={"api_port": port})
    run_dev(settings)
