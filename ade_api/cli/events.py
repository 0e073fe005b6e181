"""CLI commands for local events: `emit` posts a git or file event to the API, `hooks` installs
the git hooks that emit them, `watch` emits `file.changed` while files change.

All three go through `POST /api/v1/ingress/events`; the API stores the event and the ingress
workers start the rules whose triggers match it, exactly as for a webhook delivery.
"""

from __future__ import annotations

import itertools
import json
import signal
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, TextIO

import click
import httpx

from ade_api.cli import git_hooks
from ade_api.cli.root import Api, fail, json_option, main, url_option
from ade_tasks.globs import path_matches
from ade_tasks.json_document import JsonObject
from ade_tasks.rules.triggers import canonical_trigger_type
from ade_tasks.settings import Settings

if TYPE_CHECKING:
    from watchfiles import Change

EVENTS_PATH = "/api/v1/ingress/events"
# The API refuses more paths than this in one event (LocalEvent.paths).
MAX_PATHS = 10_000
# Never worth an event: git's own files, installed packages, ADE's embedded state.
ALWAYS_IGNORED = (".git", "node_modules", ".ade")
PREVIEW = 3


class ApiCallError(Exception):
    """The API could not be reached or refused a call; the message says what to do."""


def api_request(api: Api, method: str, path: str, body: object = None) -> Any:
    """Like `Api.call` (`body` sent as JSON), but raising `ApiCallError` so a long-running
    command can go on."""
    try:
        response = api.client.request(method, path, json=body)
    except httpx.TransportError as exc:
        raise ApiCallError(
            f"cannot reach the ADE API at {api.base} ({exc}); start it with `ade-tasks dev` "
            "(or `ade-tasks api`) or point --url / ADE_API_URL at it"
        ) from exc
    if response.status_code >= 400:
        try:
            detail = response.json().get("detail", response.text)
        except ValueError:
            detail = response.text
        raise ApiCallError(f"{method} {path} answered {response.status_code}: {detail}")
    return response.json()


# --- emit ----------------------------------------------------------------------------------


def parse_fields(pairs: Iterable[str]) -> dict[str, str]:
    """`--field name=value` pairs as a dict (a later name wins); BadParameter names a bad one."""
    fields: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            raise click.BadParameter(
                f"{pair!r} must look like name=value (the run reads it as "
                "{{trigger.fields.name}})",
                param_hint="--field",
            )
        fields[name.strip()] = value
    return fields


def split_paths(text: str) -> list[str]:
    """Paths from `--paths-from`: NUL-separated (`git diff -z`) if there is a NUL, else lines."""
    parts = text.split("\0") if "\0" in text else text.splitlines()
    return [part for part in parts if part.strip()]


def cap_paths(paths: Iterable[str]) -> tuple[list[str], int]:
    """Sorted unique paths, at most MAX_PATHS of them, and how many were left out."""
    unique = sorted(set(paths))
    return unique[:MAX_PATHS], max(0, len(unique) - MAX_PATHS)


def event_summary(
    kind: str,
    *,
    repo: str | None,
    branch: str | None,
    sha: str | None,
    title: str | None,
    paths: Sequence[str],
) -> str:
    """The one-line description a run shows for the event it came from."""
    where = f" in {repo}" if repo else ""
    if kind == "file.changed":
        return f"{_count(paths)}{where}" + (f": {_preview(paths)}" if paths else "")
    what = "Commit" if kind == "git.commit" else "Push"
    head = f" {sha[:10]}" if sha else ""
    on = f" {'on' if kind == 'git.commit' else 'to'} {branch}" if branch else ""
    return f"{what}{head}{on}{where}" + (f": {title}" if title else "")


def _count(paths: Sequence[str]) -> str:
    return f"{len(paths)} changed path{'s' * (len(paths) != 1)}"


def _preview(paths: Sequence[str]) -> str:
    return ", ".join(paths[:PREVIEW]) + (", …" if len(paths) > PREVIEW else "")


def _blank_to_none(value: str | None) -> str | None:
    # The hooks always pass every option; git gives an empty branch on a detached HEAD.
    return value if value else None


def _fields_option(
    _ctx: click.Context, _param: click.Parameter, value: tuple[str, ...]
) -> dict[str, str]:
    return parse_fields(value)


@main.command("emit")
@click.argument("event_type", metavar="TYPE")
@click.option("--repo", help="repository name rules filter on (`repo:`), e.g. acme/api")
@click.option("--branch", help="branch name rules filter on (`branches:`)")
@click.option("--sha", help="the head commit sha")
@click.option("--title", help="e.g. the commit subject")
@click.option("--body", help="e.g. the commit message body")
@click.option("--author", help="who made the change")
@click.option("--summary", help="the run's one-line trigger description (default: derived)")
@click.option("--path", "paths", multiple=True, help="a changed path, relative; repeat it")
@click.option(
    "--paths-from",
    # A file name that is not UTF-8 still yields an event (with U+FFFD in that name).
    type=click.File("r", encoding="utf-8", errors="replace"),
    help="read changed paths from a file (- is stdin), one a line or NUL-separated",
)
@click.option(
    "--field",
    "fields",
    multiple=True,
    metavar="NAME=VALUE",
    callback=_fields_option,
    help="an extra value runs read as {{trigger.fields.NAME}}; repeat it",
)
@click.option("--delivery-id", help="a second event with the same id stores nothing")
@click.option(
    "--timeout", type=click.FloatRange(0.1, 300), default=10, show_default=True, help="seconds"
)
@url_option
@json_option
@click.pass_obj
def emit(
    settings: Settings,
    event_type: str,
    repo: str | None,
    branch: str | None,
    sha: str | None,
    title: str | None,
    body: str | None,
    author: str | None,
    summary: str | None,
    paths: tuple[str, ...],
    paths_from: TextIO | None,
    fields: dict[str, str],
    delivery_id: str | None,
    timeout: float,
    url: str | None,
    as_json: bool,
) -> None:
    """Post a local event (git.commit, git.push or file.changed) to the API; the rules whose
    triggers match it run. Prints the stored event's id, or that it was a duplicate."""
    kind = canonical_trigger_type(event_type)
    repo, branch, sha = _blank_to_none(repo), _blank_to_none(branch), _blank_to_none(sha)
    title, author = _blank_to_none(title), _blank_to_none(author)
    listed = [*paths, *(split_paths(paths_from.read()) if paths_from else [])]
    sent_paths, left_out = cap_paths(listed)
    if left_out:
        click.echo(f"warning: {left_out} changed paths left out (at most {MAX_PATHS})", err=True)
    payload = {
        "type": kind,
        "repo": repo,
        "branch": branch,
        "title": title,
        "body": _blank_to_none(body),
        "author": author,
        "head_sha": sha,
        "paths": sent_paths,
        "summary": summary
        or event_summary(kind, repo=repo, branch=branch, sha=sha, title=title, paths=sent_paths),
        "delivery_id": _blank_to_none(delivery_id),
        "fields": fields,
    }
    api = Api(settings, url)
    api.client.timeout = httpx.Timeout(timeout)
    try:
        accepted = api_request(api, "POST", EVENTS_PATH, payload)
    except ApiCallError as exc:
        fail(str(exc), code=1)
    if as_json:
        click.echo(json.dumps(accepted, indent=2))
    elif accepted["duplicate"]:
        click.echo(f"duplicate: delivery {accepted['delivery_id']} was seen before; nothing stored")
    else:
        click.echo(f"event {accepted['event_id']} stored (delivery {accepted['delivery_id']})")


# --- hooks ---------------------------------------------------------------------------------


@main.group()
def hooks() -> None:
    """Git hooks that emit git.commit (post-commit) and git.push (post-receive)."""


_repo_argument = click.argument(
    "repo_path", required=False, default=".", type=click.Path(file_okay=False, path_type=Path)
)


@hooks.command("install")
@_repo_argument
@click.option("--url", help="API base URL the hooks post to (default: ADE_API_URL when they run)")
@click.option(
    "--force", is_flag=True, help="replace another tool's hook, keeping it as .ade-backup"
)
def hooks_install(repo_path: Path, url: str | None, force: bool) -> None:
    """Install the post-commit and post-receive hooks into REPO_PATH (default: here)."""
    try:
        executable = git_hooks.ade_executable()
        changes = git_hooks.install(repo_path, executable, url, force=force)
        name = git_hooks.repo_name(repo_path)
    except git_hooks.HookError as exc:
        fail(str(exc))
    for change in changes:
        click.echo(f"{change.name}: {change.outcome} ({change.path})")
    click.echo(
        f"events carry repo {name!r} (set `git config ade.repo owner/name` to match a rule's "
        f"repo filter) and call {executable}"
    )


@hooks.command("uninstall")
@_repo_argument
def hooks_uninstall(repo_path: Path) -> None:
    """Remove the ADE hooks from REPO_PATH (default: here), restoring any hook they replaced."""
    try:
        changes = git_hooks.uninstall(repo_path)
    except git_hooks.HookError as exc:
        fail(str(exc))
    for change in changes:
        click.echo(f"{change.name}: {change.outcome} ({change.path})")


# --- watch ---------------------------------------------------------------------------------


def file_change_excludes(rules: Iterable[JsonObject]) -> list[list[str]]:
    """The `exclude` globs of each file.changed trigger of every rule that can run."""
    excludes = []
    for rule in rules:
        if not rule.get("enabled") or rule.get("trust_state", "trusted") != "trusted":
            continue
        for trigger in rule.get("document", {}).get("triggers", []):
            if canonical_trigger_type(str(trigger.get("type"))) == "file.changed":
                excludes.append([str(glob) for glob in trigger.get("exclude") or []])
    return excludes


def is_ignored(path: str, excludes: Sequence[Sequence[str]]) -> bool:
    """Whether a changed relative path is worth no event: under an always-ignored directory, or
    excluded by every file.changed trigger (one that wants it is enough to send it)."""
    if any(part in ALWAYS_IGNORED for part in path.split("/")):
        return True
    return bool(excludes) and all(path_matches(path, globs) for globs in excludes)


def changed_paths(
    changes: Iterable[tuple[object, str]],
    root: Path,
    excludes: Sequence[Sequence[str]],
    is_dir: Callable[[Path], bool] = Path.is_dir,
) -> list[str]:
    """A watcher's batch of (change, absolute path) as sorted, unique paths relative to `root`,
    without ignored paths, directories and anything outside `root`."""
    kept = set()
    for _change, raw in changes:
        path = Path(raw)
        try:
            relative = path.relative_to(root).as_posix()
        except ValueError:
            continue
        # A new file reports its directories too; rules' globs are about files.
        if relative in ("", ".") or is_dir(path) or is_ignored(relative, excludes):
            continue
        kept.add(relative)
    return sorted(kept)


def watch_loop(
    batches: Iterable[Iterable[tuple[object, str]]],
    root: Path,
    load_excludes: Callable[[], list[list[str]]],
    send: Callable[[list[str]], str],
    say: Callable[[str], None],
    pending: set[str],
    excludes: list[list[str]] | None = None,
) -> None:
    """Turn each batch into at most one event.

    The excludes are read again before each batch, so a rule synced while watching counts.
    Paths the API could not take stay in `pending` (the caller's, so it sees them after Ctrl-C)
    and go with the next batch.
    """
    excludes = excludes or []
    for batch in batches:
        changes = list(batch)
        if not changes:  # the watcher's periodic timeout: nothing changed
            continue
        try:
            excludes = load_excludes()
        except ApiCallError as exc:
            say(f"warning: using the rules' excludes read before: {exc}")
        pending.update(changed_paths(changes, root, excludes))
        pending.difference_update({path for path in pending if is_ignored(path, excludes)})
        # One event per batch; only a batch above the API's limit takes more than one.
        while pending:
            paths = sorted(pending)[:MAX_PATHS]
            try:
                outcome = send(paths)
            except ApiCallError as exc:
                say(f"warning: {len(pending)} changed paths not sent yet, retried with the "
                    f"next change: {exc}")  # fmt: skip
                break
            say(f"file.changed {outcome}: {_count(paths)}: {_preview(paths)}")
            pending.difference_update(paths)


def _watch_filter(
    root: Path, default: Callable[[Change, str], bool]
) -> Callable[[Change, str], bool]:
    """watchfiles' default filter (editor swap files, caches, virtualenvs), applied to the path
    relative to `root` so that the directories above the project never count, plus ours."""

    def keep(change: Change, raw: str) -> bool:
        try:
            relative = Path(raw).relative_to(root).as_posix()
        except ValueError:
            return False
        if relative == ".":
            return False
        return default(change, relative) and not is_ignored(relative, ())

    return keep


def _stop_on_sigterm() -> None:
    """Make SIGTERM stop the watcher like Ctrl-C (service managers and tests send it)."""

    def interrupt(_signum: int, _frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)


@main.command("watch")
@click.argument(
    "path", required=False, type=click.Path(exists=True, file_okay=False, path_type=Path)
)
@click.option(
    "--debounce-ms",
    type=click.IntRange(10, 60_000),
    default=750,
    show_default=True,
    help="a batch ends after this long without changes (one event per batch)",
)
@url_option
@click.pass_obj
def watch(settings: Settings, path: Path | None, debounce_ms: int, url: str | None) -> None:
    """Emit file.changed for each batch of changes under PATH (default: the `default` project)."""
    import watchfiles

    root = (path or settings.project_root("default")).resolve()
    api = Api(settings, url)
    repo = git_hooks.repo_name(root)

    def load_excludes() -> list[list[str]]:
        return file_change_excludes(api_request(api, "GET", "/api/v1/rules"))

    def send(paths: list[str]) -> str:
        summary = event_summary(
            "file.changed", repo=repo, branch=None, sha=None, title=None, paths=paths
        )
        body = {"type": "file.changed", "repo": repo, "paths": paths, "summary": summary}
        accepted = api_request(api, "POST", EVENTS_PATH, body)
        return "duplicate" if accepted["duplicate"] else f"event {accepted['event_id']}"

    try:
        # An unreachable API is worth a clear error now, not at the first change.
        excludes = load_excludes()
    except ApiCallError as exc:
        fail(str(exc), code=1)
    unsent: set[str] = set()
    _stop_on_sigterm()
    try:
        batches = watchfiles.watch(
            root,
            watch_filter=_watch_filter(root, watchfiles.DefaultFilter()),
            # watchfiles' `step` is the quiet time that ends a batch; `debounce` bounds a batch
            # during a long burst (a checkout), so events still flow while it lasts.
            step=debounce_ms,
            debounce=max(1600, 4 * debounce_ms),
            # An empty batch after a quiet `rust_timeout` tells us the watcher is set up, so
            # "watching" is never printed before a change would be seen.
            rust_timeout=debounce_ms,
            yield_on_timeout=True,
            raise_interrupt=True,
        )
        first = next(batches)
        click.echo(f"watching {root} for changes; Ctrl-C stops")
        watch_loop(
            itertools.chain([first], batches), root, load_excludes, send, click.echo, unsent,
            excludes,
        )  # fmt: skip
    except KeyboardInterrupt:
        pass
    click.echo(f"stopped watching {root}")
    if unsent:
        paths = sorted(unsent)
        click.echo(f"warning: {_count(paths)} never sent: {_preview(paths)}", err=True)
        sys.exit(1)
