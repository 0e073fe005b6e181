"""The doctor's checks, in the order they run (`CHECKS`), each with what to do when it fails.

They look at the cluster from the machine the doctor runs on: the database, broker, workers and
beats are the cluster's own, but the providers and the sandbox are this machine's (run the doctor
on a worker host to check a worker's). Choices where a cluster differs:

- workers: a queue an enabled rule uses (or `ade.control`, where recovery runs, or `ade.ingress`,
  where webhooks and events are matched) without a worker fails; a default queue no enabled rule
  uses (`ade.agent` in a cluster without agent rules) only warns, and so does a worker that
  consumes `ade.ingress` beside a run queue (runs wait behind matching there). The embedded
  broker of `ade-tasks dev` lives in that process, so workers and the broker are not checked
  from outside it.
- beats: no live beat fails (schedules do not fire); a beat whose clock is more than
  `CLOCK_WARN_SECONDS` off the database's warns.
- providers: only configured ones (`ADE_PROVIDERS__<NAME>__*`) are judged, from the engine's
  settings alone (a run never reads OPENAI_API_KEY and the like); none configured warns.
  `ade-tasks providers --check` makes the real call.
- GitHub: see `github_token`; no token warns (a cluster may use no GitHub at all).
- sandbox: `ADE_SANDBOX=off` warns (an admin's opt-out), no usable bubblewrap fails.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Sequence
from pathlib import Path

from celery import Celery
from kombu.utils.url import maybe_sanitize_url
from pydantic import ValidationError
from sqlalchemy import Engine, make_url, text

from ade_tasks.clock import utcnow
from ade_tasks.db import heartbeats as heartbeats_db
from ade_tasks.db import rules as rules_db
from ade_tasks.db.clock import read_clock
from ade_tasks.db.engine import create_db_engine, create_session_factory
from ade_tasks.db.migrate import current_revision, schema_lag
from ade_tasks.env_file import environment_with_env_file
from ade_tasks.json_document import JsonObject
from ade_tasks.settings import Settings
from ade_workers.agents.readiness import providers_report
from ade_workers.celery.app import (
    CONTROL_QUEUE,
    DEFAULT_QUEUES,
    INGRESS_QUEUE,
    broker_reachable,
    create_celery_app,
)
from ade_workers.doctor.check import Check, Finding, Probe, Verdict, settings_problems
from ade_workers.doctor.github_token import check_token
from ade_workers.sandbox.host import BWRAP, HOST_NEEDS, SETTING, sandbox_problem

CLOCK_WARN_SECONDS = 5.0
#: The default queues that run rules (the others match events and sweep: `ingress_queue`).
RUN_QUEUES = tuple(q for q in DEFAULT_QUEUES if q not in (CONTROL_QUEUE, INGRESS_QUEUE))
#: How long a worker has to answer the broadcast that lists its queues.
INSPECT_SECONDS = 3.0


def check_settings(probe: Probe) -> Finding:
    """The settings load from the environment."""
    error = probe.settings_error
    if error is not None:
        return Finding(
            Verdict.FAIL,
            "; ".join(settings_problems(error)),
            "correct or unset the variables named (config/.env.example lists them all)",
        )
    settings = probe.loaded
    database = make_url(settings.effective_database_url).render_as_string(hide_password=True)
    return Finding(Verdict.OK, f"database {database}, broker {_shown(settings.broker_url)}")


def _shown(broker_url: str) -> str:
    """The broker URL without its password (kombu's own redaction: any transport's form)."""
    return str(maybe_sanitize_url(broker_url))


def _engine(probe: Probe) -> Engine:
    url = probe.loaded.effective_database_url
    # The driver's own connect timeout, inside the check's bound.
    connect: dict[str, float] = (
        {"timeout": probe.timeout}
        if url.startswith("sqlite")
        else {"connect_timeout": max(int(probe.timeout), 1)}
    )
    engine: Engine = probe.resource("engine", lambda: create_db_engine(url, connect_args=connect))
    return engine


def check_database(probe: Probe) -> Finding:
    """The database answers a query."""
    settings = probe.loaded
    url = make_url(settings.effective_database_url)
    if url.get_backend_name() == "sqlite" and url.database and not Path(url.database).exists():
        return Finding(
            Verdict.FAIL,
            f"the embedded database {url.database} does not exist",
            "run `ade-tasks db upgrade` (or `ade-tasks dev`) here, or set ADE_DATABASE_URL",
        )
    started = time.monotonic()
    try:
        with _engine(probe).connect() as connection:
            connection.execute(text("SELECT 1"))
    except Exception as exc:
        reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
        return Finding(
            Verdict.FAIL,
            f"{url.render_as_string(hide_password=True)} cannot be reached: {reason}",
            "check ADE_DATABASE_URL (host, port, database, user, password) and that the server "
            "runs and accepts connections from this host",
        )
    return Finding(Verdict.OK, f"answers ({(time.monotonic() - started) * 1000:.0f} ms)")


def check_schema(probe: Probe) -> Finding:
    """The database schema is at this code's head revision."""
    engine = _engine(probe)
    lag = schema_lag(engine)
    if lag is not None:
        return Finding(Verdict.FAIL, lag.split(": run", 1)[0], "run `ade-tasks db upgrade`")
    return Finding(Verdict.OK, f"at revision {current_revision(engine)} (head)")


def _celery(probe: Probe) -> Celery:
    return probe.resource("celery", lambda: create_celery_app(probe.loaded))


def _embedded_broker(probe: Probe) -> bool:
    return probe.loaded.broker_url.startswith("memory")


def check_broker(probe: Probe) -> Finding:
    """The broker accepts a connection."""
    if _embedded_broker(probe):
        return Finding(Verdict.OK, "the embedded in-memory broker of `ade-tasks dev`")
    problem = broker_reachable(_celery(probe), timeout=probe.timeout)
    if problem is not None:
        return Finding(
            Verdict.FAIL,
            f"{_shown(probe.loaded.broker_url)} cannot be reached: {problem}",
            "check ADE_BROKER_URL and that Redis or RabbitMQ runs and accepts connections "
            "from this host",
        )
    return Finding(Verdict.OK, "accepts connections")


def rule_queues(probe: Probe) -> set[str] | None:
    """The queues enabled rules send runs to (None when the database cannot say)."""
    try:
        with create_session_factory(_engine(probe))() as session:
            rows = [row for row in rules_db.list_rules(session) if row.enabled]
    except Exception:  # the database check says what is wrong with it
        return None
    queues = set()
    for row in rows:
        try:
            queues.add(rules_db.load_rule(row).effective_queue)
        except Exception:  # an unreadable rule cannot run anywhere; its health says why
            continue
    return queues


def check_workers(probe: Probe) -> Finding:
    """Each queue that runs are sent to has a worker consuming it."""
    if _embedded_broker(probe):
        return Finding(Verdict.SKIP, "the embedded broker: `ade-tasks dev` runs its own worker")
    wait = min(INSPECT_SECONDS, probe.timeout / 2)
    inspect = _celery(probe).control.inspect(timeout=wait)
    answers: dict[str, list[JsonObject]] = inspect.active_queues() or {}
    consumers: dict[str, list[str]] = {}
    for worker, queues in answers.items():
        for queue in queues:
            consumers.setdefault(str(queue["name"]), []).append(worker)
    if not answers:
        return Finding(
            Verdict.FAIL,
            f"no worker answered within {wait:g} s: queued runs are not executed",
            f"start workers: `ade-tasks worker -Q {','.join(RUN_QUEUES)}` and `ade-tasks worker "
            f"-Q {INGRESS_QUEUE},{CONTROL_QUEUE}` (on hosts that reach the broker and the "
            "database)",
        )
    used = rule_queues(probe)
    needed = {CONTROL_QUEUE, INGRESS_QUEUE, *(used if used is not None else DEFAULT_QUEUES)}
    shown = sorted(needed | set(DEFAULT_QUEUES))
    lines = [f"{queue}: {len(consumers.get(queue, []))} worker(s)" for queue in shown]
    missing = sorted(q for q in needed if q not in consumers)
    idle = sorted(q for q in DEFAULT_QUEUES if q not in consumers and q not in needed)
    summary = f"{len(answers)} worker(s) answered; " + ", ".join(lines)
    if missing:
        return Finding(
            Verdict.FAIL,
            f"no worker consumes {', '.join(missing)}: runs sent there wait; {summary}",
            f"start a worker for it: `ade-tasks worker -Q {','.join(missing)}` (on a host "
            "that reaches the broker and the database)",
        )
    warnings: list[tuple[str, str]] = []  # (what, what to do)
    if idle:
        warnings.append((
            f"no worker consumes {', '.join(idle)}, which no enabled rule uses yet",
            f"before enabling rules that use it: `ade-tasks worker -Q {','.join(idle)}`",
        ))  # fmt: skip
    shared = sorted(
        worker
        for worker, queues in answers.items()
        if {str(q["name"]) for q in queues} - {CONTROL_QUEUE, INGRESS_QUEUE}
        and any(q["name"] == INGRESS_QUEUE for q in queues)
    )
    if shared:
        warnings.append((
            f"{', '.join(shared)} match(es) webhooks and events ({INGRESS_QUEUE}) in the pool "
            "that runs rules: runs wait while matching holds its processes",
            f"give matching a worker of its own: `ade-tasks worker -Q {INGRESS_QUEUE},"
            f"{CONTROL_QUEUE} -c 2`, then take {CONTROL_QUEUE} and {INGRESS_QUEUE} off the "
            "others' -Q (a worker on ade.control also consumes ade.ingress)",
        ))  # fmt: skip
    if warnings:
        return Finding(
            Verdict.WARN,
            "; ".join(what for what, _ in warnings) + f"; {summary}",
            "; ".join(fix for _, fix in warnings),
        )
    return Finding(Verdict.OK, summary)


def check_beats(probe: Probe) -> Finding:
    """A beat is alive (its heartbeat is recent) and its clock agrees with the database's."""
    factory = create_session_factory(_engine(probe))
    with factory() as session:
        beats = [b for b in heartbeats_db.recent(session) if b.kind == heartbeats_db.BEAT]
    reading = read_clock(factory)  # heartbeats are database time; this machine's may be off
    now = reading.database if reading is not None else utcnow()
    alive = [beat for beat in beats if beat.alive(now)]
    if not alive:
        seen = max((beat.seen_at for beat in beats), default=None)
        last = f"; the last one was seen at {seen:%Y-%m-%d %H:%M:%S}Z" if seen else ""
        return Finding(
            Verdict.FAIL,
            f"no beat is alive{last}: schedules do not fire (workers still recover lost runs)",
            "start one: `ade-tasks beat` (several are fine: they share work through the database)",
        )
    skewed = [
        f"{beat.process_id} is {beat.clock_offset:+.1f} s off the database's clock"
        for beat in alive
        if beat.clock_offset is not None and abs(beat.clock_offset) > CLOCK_WARN_SECONDS
    ]
    if skewed:
        return Finding(
            Verdict.WARN,
            f"{len(alive)} beat(s) alive; " + "; ".join(skewed),
            "sync the machine's clock (NTP); slots are judged by the database's time, but logs "
            "and local previews drift",
        )
    return Finding(Verdict.OK, f"{len(alive)} beat(s) alive")


def check_providers(probe: Probe) -> Finding:
    """The configured agent providers are usable from this machine."""
    settings = probe.loaded
    # A run reads only the engine's settings, never OPENAI_API_KEY and the like.
    env = {
        k: v
        for k, v in environment_with_env_file(os.environ).items()
        if k.startswith("ADE_") or k in ("PATH", "HOME")
    }
    report = providers_report(env, run_version=lambda _path: None)
    configured = [s for s in report if settings.provider(s.name) is not None]
    if not configured:
        return Finding(
            Verdict.WARN,
            "no agent provider is configured: agent-session rules cannot run",
            "set ADE_PROVIDERS__<NAME>__API_KEY (`ade-tasks providers` lists what each needs)",
        )
    broken = [s for s in configured if not s.ready]
    ready = ", ".join(s.name for s in configured if s.ready) or "none"
    if broken:
        return Finding(
            Verdict.FAIL,
            f"not ready here: {', '.join(s.name for s in broken)} (ready: {ready})",
            "; ".join(f"{s.name}: {fix}" for s in broken for fix in s.fixes),
        )
    return Finding(
        Verdict.OK,
        f"ready here: {ready} (`ade-tasks providers --check` makes one real call to each)",
    )


def check_github(probe: Probe) -> Finding:
    """The GitHub token is accepted and has the scopes the engine's writes need."""
    return check_token(probe.loaded.github, probe.timeout)


def check_sandbox(probe: Probe) -> Finding:
    """Bubblewrap is here and can make the sandbox every command and agent runs in."""
    if probe.loaded.sandbox == "off":
        return Finding(
            Verdict.WARN,
            f"{SETTING}=off: commands and agents run without a sandbox (every step result and "
            "capability report says so)",
            f"install bubblewrap and unset {SETTING} unless the opt-out is deliberate",
        )
    problem = sandbox_problem.__wrapped__()  # probe now, not the process's cached answer
    if problem is not None:
        return Finding(Verdict.FAIL, problem, HOST_NEEDS)
    return Finding(Verdict.OK, f"{shutil.which(BWRAP)} creates the sandbox's namespaces")


#: Every check, in the order the doctor runs and prints them.
CHECKS: Sequence[Check] = (
    Check("settings", "the settings load", check_settings),
    Check("database", "the database answers", check_database, ("settings",)),
    Check("schema", "the schema is at head", check_schema, ("database",)),
    Check("broker", "the broker accepts connections", check_broker, ("settings",)),
    Check("workers", "every queue has a worker", check_workers, ("broker",)),
    Check("beats", "a beat is alive", check_beats, ("schema",)),
    Check("providers", "configured providers are ready", check_providers, ("settings",)),
    Check("github", "the GitHub token and its scopes", check_github, ("settings",)),
    Check("sandbox", "a sandbox can be made", check_sandbox, ("settings",)),
)


def load_probe(timeout: float) -> Probe:
    """The probe for a doctor run: the settings from the environment, or why they do not load."""
    try:
        return Probe(Settings(), timeout)
    except (ValidationError, ValueError) as exc:
        return Probe(None, timeout, settings_error=exc)
