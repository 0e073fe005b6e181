"""`ade-tasks dev`: the whole stack in one process, with no servers to install.

SQLite under ./.ade/, Celery's in-memory broker, two real Celery workers (thread pools) and
beat in threads, and the API served by uvicorn in the main thread. One worker runs rules; the
other matches webhooks and events and runs the recovery sweep (`ade.ingress`, `ade.control`), as
in the deployment examples, so that slow matching never holds a thread a run needs. Because the
database is the record, a run queued before a restart is re-sent at start-up by the recovery
sweep.

The data directory stays `./.ade/`, inside the default project's root (the working
directory), although agent sessions work there: the CLI run in this directory finds the
stack's token in it, and deleting it resets the stack. What keeps agents out of it is not
its place but the engine: `ProtectedPaths` refuses every agent tool's read or write of a
`.ade` directory (and of a data dir configured elsewhere), leaves it out of listings and
searches, and every session masks the token's value. Commands an agent runs (`bash`, in
`edit` mode only with an approval) are the worker's user and could read it, which is why the
token is masked in their output too; and the directory holds a `.gitignore` of `*`, so a
`git add -A` in the project never commits the database or the token.

While it runs, dev watches the rules directory and syncs it on every change, printing what
changed or each problem on a line of its own; a rule whose file is broken keeps its last good
version (as `rules sync` does). The console shows one line per run start and end.
"""

from __future__ import annotations

import logging
import os
import shlex
import shutil
import signal
import socket
import sys
import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path

import click
import uvicorn
import watchfiles
from celery import Celery
from celery.beat import EmbeddedService
from fastapi import FastAPI

from ade_api.http.app import create_app
from ade_api.http.header_timeout import HTTP_PROTOCOL
from ade_tasks.access.roles import Role
from ade_tasks.db import tokens as tokens_db
from ade_tasks.db.engine import SessionFactory, create_db_engine, create_session_factory
from ade_tasks.db.migrate import upgrade
from ade_tasks.db.rule_sync import SyncReport
from ade_tasks.db.rules import list_rules, load_rule
from ade_tasks.logs import configure_logging, uvicorn_log_config
from ade_tasks.rule_files.sync import sync_rules_dir
from ade_tasks.rules.loader import RULE_SUFFIXES, LoadResult
from ade_tasks.runs.recovery import recover
from ade_tasks.settings import Settings
from ade_workers.celery.app import CONTROL_QUEUE, INGRESS_QUEUE, CelerySender, create_celery_app
from ade_workers.engine import run_monitor, runner_config
from ade_workers.engine.runner_config import RunNotice

log = logging.getLogger(__name__)

#: The queues of the ingress worker, and its threads (matching waits little on a laptop).
INGRESS_QUEUES = (INGRESS_QUEUE, CONTROL_QUEUE)
INGRESS_CONCURRENCY = 2


def rule_queues(session_factory: SessionFactory) -> tuple[str, ...]:
    """Every queue a rule names, so the embedded worker consumes them all."""
    with session_factory() as session:
        return tuple(sorted({load_rule(row).effective_queue for row in list_rules(session)}))


def start_worker(
    app: Celery, queues: tuple[str, ...], concurrency: int, hostname: str = "dev@ade"
) -> tuple[object, threading.Thread]:
    """A real Celery WorkController with a thread pool, running in a background thread."""
    worker = app.WorkController(
        hostname=hostname,
        pool_cls="threads",
        concurrency=concurrency,
        queues=list(queues),
        without_heartbeat=True,
        without_mingle=True,
        without_gossip=True,
        loglevel="WARNING",
    )
    thread = threading.Thread(target=worker.start, name=f"ade-worker-{hostname}", daemon=True)
    thread.start()
    return worker, thread


def ensure_port_free(host: str, port: int) -> None:
    """Fail before starting anything when the API port is taken (most often: another dev)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise click.ClickException(
                f"cannot listen on {host}:{port} ({exc.strerror}); is another `ade-tasks dev` "
                "running? Stop it, or pick another port with --port or ADE_API_PORT"
            ) from None


def api_server_config(api: FastAPI, settings: Settings) -> uvicorn.Config:
    """The embedded API's uvicorn config: quieter than `ade-tasks api` (warnings only, no access
    log), with the same header deadline and the same credential redaction in its log lines."""
    return uvicorn.Config(
        api,
        host=settings.api_host,
        port=settings.api_port,
        log_level="warning",
        lifespan="off",
        http=HTTP_PROTOCOL,  # closes connections whose headers do not arrive in 10 s
        log_config=uvicorn_log_config(settings.log_format, "WARNING"),
    )


def _interrupt(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt


DATA_DIR_GITIGNORE = "# ade-tasks dev: the local stack's database and token; never commit them\n*\n"


def ensure_data_dir(settings: Settings) -> None:
    """The data directory, private to this user when created, with a `.gitignore` of `*`."""
    data_dir = settings.data_dir
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    ignore = data_dir / ".gitignore"
    if not ignore.exists():
        ignore.write_text(DATA_DIR_GITIGNORE)


def ensure_dev_token(session_factory: SessionFactory, settings: Settings) -> str:
    """The local stack's admin token, written to `<data dir>/api-token` (0600) the first time so
    the CLI in this directory is signed in; a token revoked since is replaced."""
    path = settings.dev_token_file
    current = path.read_text().strip() if path.exists() else ""
    with session_factory.begin() as session:
        if current and tokens_db.authenticate(session, current) is not None:
            return f"admin token for the CLI and /ui in {path}"
        _, secret = tokens_db.create_token(session, "dev", Role.ADMIN, "ade-tasks dev")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(secret + "\n")
    return f"created an admin token for the CLI and /ui in {path}"


def cli_script() -> Path:
    """The `ade-tasks` console script of this installation: beside the interpreter in a venv."""
    beside = Path(sys.executable).parent / "ade-tasks"
    if beside.exists():
        return beside
    found = shutil.which("ade-tasks")
    return Path(found) if found else Path(sys.argv[0]).absolute()


def cli_hint(settings: Settings, cwd: Path, script: Path, rule_ids: set[str]) -> list[str]:
    """The banner's lines that reach this stack from a new shell, where neither an activated
    venv nor `make dev`'s PATH is in effect: the script by its path (relative when it lies in
    `cwd`), the URL and data dir when they are not the ones the CLI finds by default, and the
    line that puts the CLI on the PATH."""
    try:
        shown = str(script.relative_to(cwd))
    except ValueError:
        shown = str(script)
    words = [shown, *(["run", "hello", "--wait"] if "hello" in rule_ids else ["rules", "list"])]
    default = Settings.model_construct()  # what a CLI with no ADE_* variables uses
    if settings.effective_api_url != default.effective_api_url:
        words += ["--url", settings.effective_api_url]
    command = shlex.join(words)
    data_dir = cwd / settings.data_dir  # as dev resolves it (an absolute data_dir stays)
    if data_dir != cwd / default.data_dir:
        command = f"ADE_DATA_DIR={shlex.quote(str(data_dir))} {command}"
    bin_dir = str(script.parent).replace("\\", "\\\\")
    for special in '"$`':
        bin_dir = bin_dir.replace(special, "\\" + special)
    return [
        f"try it in another shell, in this directory ({cwd}):",
        f"  {command}",
        "put the CLI on your PATH (for this shell; add the line to ~/.bashrc to keep it):",
        f'  export PATH="{bin_dir}:$PATH"',
    ]


class Console:
    """The dev console's lines about runs and rules, whole lines even from many threads."""

    def __init__(self, echo: Callable[..., None] = click.echo) -> None:
        self._echo = echo
        self._lock = threading.Lock()

    def line(self, text: str, err: bool = False) -> None:
        with self._lock:
            self._echo(text, err=err)

    def run_notice(self, notice: RunNotice) -> None:
        """One line as a run starts or ends: time, rule, short run id, status, duration."""
        clock = datetime.now().strftime("%H:%M:%S")
        text = f"{clock} run {notice.rule_id} {notice.run_id[:8]} {notice.status}"
        if notice.status != runner_config.STARTED:
            text += f" ({notice.seconds:.1f}s)"
        self.line(text)

    def rules_synced(
        self, loaded: LoadResult, report: SyncReport, consumed: tuple[str, ...]
    ) -> None:
        """What a rules sync changed, or its problems: each problem on a line of its own."""
        kinds = (("added", report.added), ("updated", report.updated), ("removed", report.removed))
        changes = [f"{what} {', '.join(ids)}" for what, ids in kinds if ids]
        if changes:
            self.line(f"rules: {'; '.join(changes)}")
        for problem in loaded.problems:
            self.line(f"  rule problem: {problem}", err=True)
        if loaded.problems:
            self.line(
                f"rules: {len(loaded.problems)} problem{'' if len(loaded.problems) == 1 else 's'};"
                " every rule keeps its last good "
                "version until the files are fixed, and none is removed meanwhile",
                err=True,
            )
        changed = {*report.added, *report.updated}
        for item in loaded.rules:
            if item.rule_id not in changed:  # an unchanged file's rule is not parsed again
                continue
            queue = item.rule.effective_queue
            if queue not in consumed:
                self.line(
                    f"rules: {item.rule.id} runs on queue {queue!r}, which this worker does not "
                    "consume; restart `ade-tasks dev` to run it",
                    err=True,
                )


def watch_rules(
    session_factory: SessionFactory,
    rules_dir: Path,
    consumed: tuple[str, ...],
    console: Console,
    stop: threading.Event,
) -> None:
    """Sync the rules directory whenever a rule file in it changes, until `stop` is set."""

    def rule_file(_change: watchfiles.Change, path: str) -> bool:
        return path.endswith(RULE_SUFFIXES)  # not an editor's swap or backup file

    had_problems = False
    # step: how long the directory must stay quiet before a sync (an editor's save is several
    # events); 200 ms keeps a sync to one per save without a noticeable delay.
    for _changes in watchfiles.watch(
        rules_dir, watch_filter=rule_file, stop_event=stop, step=200, raise_interrupt=False
    ):
        try:
            loaded, report = sync_rules_dir(session_factory, rules_dir)
        except Exception as exc:  # the database blinked: the next save syncs again
            console.line(f"rules: sync failed ({exc!r}); save a rule file to try again", True)
            continue
        console.rules_synced(loaded, report, consumed)
        if had_problems and not loaded.problems:
            console.line(f"rules: every file in {rules_dir} loads again")
        had_problems = bool(loaded.problems)


def start_rules_watcher(
    session_factory: SessionFactory, settings: Settings, consumed: tuple[str, ...],
    console: Console,
) -> threading.Event | None:  # fmt: skip
    """Watch the rules directory in a thread; returns the event that stops it (None: no
    directory to watch)."""
    if not settings.rules_dir.is_dir():
        return None
    stop = threading.Event()

    def watch() -> None:
        try:
            watch_rules(session_factory, settings.rules_dir, consumed, console, stop)
        except Exception as exc:  # e.g. the directory was deleted: say so instead of a traceback
            console.line(
                f"rules: stopped watching {settings.rules_dir} ({exc}); sync by hand with "
                "`ade-tasks rules sync`, or restart `ade-tasks dev`",
                err=True,
            )

    threading.Thread(target=watch, name="ade-rules-watch", daemon=True).start()
    return stop


def run_dev(settings: Settings) -> None:
    """Start API, worker and beat; block until Ctrl-C; stop them all."""
    echo = click.echo
    ensure_port_free(settings.api_host, settings.api_port)
    configure_logging(settings.log_format, logging.WARNING)
    if not settings.embedded:
        echo("note: ADE_DATABASE_URL points at a server; dev mode still uses it as configured")
    ensure_data_dir(settings)
    engine = create_db_engine(settings.effective_database_url)
    echo(f"[1/4] migrating {engine.url.render_as_string(hide_password=True)}")
    upgrade(engine)
    session_factory = create_session_factory(engine)

    echo(f"[2/4] loading rules from {settings.rules_dir}")
    loaded, report = sync_rules_dir(session_factory, settings.rules_dir)
    for p in loaded.problems:
        echo(f"  rule problem: {p}", err=True)
    echo(
        f"  {len(loaded.rules)} rules ({len(report.added)} added, {len(report.updated)} updated, "
        f"{len(report.removed)} removed)"
    )

    queues = rule_queues(session_factory)
    app = create_celery_app(settings, extra_queues=queues, session_factory=session_factory)
    # The thread pool traces tasks through Celery's *current* app; make it this one.
    app.set_current()
    app.set_default()
    all_queues = tuple(q.name for q in app.conf.task_queues)
    run_queues = tuple(q for q in all_queues if q not in INGRESS_QUEUES)
    echo(
        f"[3/4] starting workers: {settings.worker_concurrency} threads on "
        f"{', '.join(run_queues)}; {INGRESS_CONCURRENCY} on {', '.join(INGRESS_QUEUES)}"
    )
    console = Console(echo)
    app.ade_runtime.on_run = console.run_notice  # before the worker takes its first task
    # An app of its own: a worker's queue selection lives on its app, and a second selection
    # on the same app would change what the first worker consumes. The in-memory broker's
    # queues are the process's, so both apps see every message.
    ingress_app = create_celery_app(
        settings.model_copy(update={"worker_housekeeping": False}),  # the run worker keeps house
        extra_queues=queues,
        session_factory=session_factory,
    )
    workers = [
        start_worker(app, run_queues, settings.worker_concurrency),
        start_worker(ingress_app, INGRESS_QUEUES, INGRESS_CONCURRENCY, "dev-ingress@ade"),
    ]
    beat = EmbeddedService(
        app, thread=True, scheduler_cls="ade_workers.celery.beat:DatabaseScheduler"
    )
    beat.start()
    # The in-memory broker starts empty: every queued run lost its message with the last process.
    swept = recover(session_factory, CelerySender(app), requeue_after=timedelta(0))
    if swept.resent:
        echo(f"  re-sent {len(swept.resent)} queued run(s) from before the restart")

    api = create_app(settings, session_factory=session_factory, celery=app)
    server = uvicorn.Server(api_server_config(api, settings))
    echo(f"[4/4] API on {settings.effective_api_url}  (docs: {settings.effective_api_url}/docs)")
    token_note = ensure_dev_token(session_factory, settings)
    echo(f"      {token_note}")
    rule_ids = {item.rule_id for item in loaded.rules}
    for line in cli_hint(settings, Path.cwd(), cli_script(), rule_ids):
        echo(f"      {line}")
    stop_watching = start_rules_watcher(session_factory, settings, all_queues, console)
    watching = (
        f"watching {settings.rules_dir} for rule changes"
        if stop_watching
        else f"not watching rules: {settings.rules_dir} does not exist"
    )
    echo(f"      {watching}; stop: Ctrl-C")
    # uvicorn handles SIGINT/SIGTERM, then re-raises the signal it caught once it has stopped; a
    # TERM (systemd, docker, `kill`) must get the same clean stop as Ctrl-C, not the default death.
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        server.run()
    except KeyboardInterrupt:
        pass  # uvicorn re-raises the Ctrl-C it handled; stopping cleanly is the expected end
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut cleanup short
        echo("stopping: cancelling running commands, stopping worker and beat")
        run_monitor.SHUTDOWN.set()
        if stop_watching is not None:
            stop_watching.set()
        beat.stop()
        from celery.worker import state

        state.should_stop = 0  # both workers read it
        for worker, worker_thread in workers:
            worker_thread.join(timeout=15)
            worker.stop(in_sighandler=False)  # type: ignore[attr-defined]
        engine.dispose()
        echo("stopped")
