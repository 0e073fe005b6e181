"""Worker observability: the log context of each task, the worker's own Prometheus metrics, and
the depth of the broker's queues.

`install(app, settings)` (called by `create_celery_app`) connects Celery signal handlers once per
process:

- task_prerun/task_postrun bind `run_id`, `rule_id` and `task_id` to the log context
  (`ade_tasks.logs`) for the duration of a task; the rule id is the message's `shadow` (the name
  `CelerySender` publishes a run under);
- after_setup_logger/after_setup_task_logger switch the handlers Celery creates for the worker
  and beat to JSON lines when `log_format` is `json`;
- with `worker_metrics_port` set, worker_init (in the worker's main process, before the pool
  forks) points prometheus_client's multiprocess mode at a directory and serves the merged
  metrics of all pool processes on that port; task_postrun counts in whichever process ran the
  task; worker_process_shutdown marks a pool process dead so its live files are dropped.

The metrics directory: `PROMETHEUS_MULTIPROC_DIR` if set (then it must belong to this worker
alone: its stale files are removed at start), else a fresh temporary directory that is removed
when the worker stops. Per-process values live in mmap files there, which is what makes counting
in forked pool processes safe. The server binds all interfaces (a Prometheus server elsewhere
scrapes it); it is off unless the port is set, and carries task names, rule ids and outcomes,
never arguments or secrets.

Cluster-wide facts (runs, queues, approvals, usage...) are not counted here: the API's
`/metrics` reads them from the database and the broker (`ade_api.http.routes.metrics`).
"""

from __future__ import annotations

import glob
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterable, Mapping
from typing import cast
from urllib.parse import urlsplit
from wsgiref.simple_server import WSGIServer

from celery import Celery, Task, signals

from ade_tasks.logs import ContextTokens, LogFormat, apply_format, bind_context, reset_context
from ade_tasks.settings import Settings
from ade_workers.celery.sender import EXECUTE_TASK
from ade_workers.celery.tasks import RunFailedError

log = logging.getLogger(__name__)

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
#: Task duration buckets (seconds): from a quick dispatch to a 12 h run.
TASK_DURATION_BUCKETS = (0.05, 0.25, 1, 5, 15, 60, 300, 900, 3600, 14400, 43200, float("inf"))


class _State:
    """What this process's handlers need; module-level because Celery signals are global."""

    log_format: LogFormat = "text"
    metrics_dir: str | None = None  # set (and inherited by forked pool processes) when enabled
    owns_dir = False
    server: WSGIServer | None = None
    metrics: _WorkerMetrics | None = None  # built on first use inside the counting process
    started: dict[str, float] = {}  # noqa: RUF012  (task id -> monotonic start, per process)
    tokens: dict[str, ContextTokens] = {}  # noqa: RUF012


_state = _State()
_lock = threading.Lock()


class _WorkerMetrics:
    """The worker-local metrics (created after multiprocess mode is on, never registered in the
    default registry: the server reads them back from the files of every process)."""

    def __init__(self) -> None:
        from prometheus_client import Counter, Histogram

        self.tasks = Counter(
            "ade_worker_tasks",
            "Tasks this worker executed, by task name and outcome (Celery state, lower case).",
            ["task", "outcome"],
            registry=None,
        )
        self.duration = Histogram(
            "ade_worker_task_duration_seconds",
            "Wall time of the tasks this worker executed, by task name.",
            ["task"],
            buckets=TASK_DURATION_BUCKETS,
            registry=None,
        )
        self.runs = Counter(
            "ade_worker_runs",
            "Runs this worker's run task ended, by rule and the status it returned "
            "(`none`: the run was already claimed or finished elsewhere).",
            ["rule", "status"],
            registry=None,
        )


def install(app: Celery, settings: Settings) -> None:
    """Connect the handlers (idempotent: a second app in the same process reuses them; the last
    settings installed decide the log format)."""
    del app  # the worker's own app reaches the handlers as the signal's sender
    _state.log_format = settings.log_format
    for signal, handler in (
        (signals.after_setup_logger, _on_setup_logger),
        (signals.after_setup_task_logger, _on_setup_logger),
        (signals.worker_init, _on_worker_init),
        (signals.worker_shutdown, _on_worker_shutdown),
        (signals.worker_process_shutdown, _on_process_shutdown),
        (signals.task_prerun, _on_task_prerun),
        (signals.task_postrun, _on_task_postrun),
    ):
        signal.connect(
            handler, weak=False, dispatch_uid=f"ade_workers.celery.metrics.{handler.__name__}"
        )


# --- logs ----------------------------------------------------------------------------------


def _on_setup_logger(logger: logging.Logger | None = None, **_: object) -> None:
    if logger is not None:
        apply_format(logger, _state.log_format)


def _on_task_prerun(
    task_id: str | None = None,
    task: Task | None = None,
    args: Iterable[object] | None = None,
    **_: object,
) -> None:
    if task_id is None or task is None:
        return
    run_id = rule_id = None
    if task.name == EXECUTE_TASK:
        arguments = list(args or ())
        run_id = str(arguments[0]) if arguments else None
        rule_id = getattr(task.request, "shadow", None) or None
    _state.tokens[task_id] = bind_context(run_id=run_id, rule_id=rule_id, task_id=task_id)
    if _state.metrics_dir is not None:
        _state.started[task_id] = time.monotonic()


def _on_task_postrun(
    task_id: str | None = None,
    task: Task | None = None,
    retval: object = None,
    state: str | None = None,
    **_: object,
) -> None:
    if task_id is None:
        return
    try:
        if _state.metrics_dir is not None and task is not None:
            _count(task, task_id, retval, state)
    except Exception:  # metrics must never fail a task
        log.exception("counting task %s failed", task_id)
    finally:
        tokens = _state.tokens.pop(task_id, None)
        if tokens is not None:
            reset_context(tokens)


def _count(task: Task, task_id: str, retval: object, state: str | None) -> None:
    with _lock:
        if _state.metrics is None:
            _state.metrics = _WorkerMetrics()
    metrics = _state.metrics
    name = str(task.name)
    metrics.tasks.labels(name, (state or "unknown").lower()).inc()
    started = _state.started.pop(task_id, None)
    if started is not None:
        metrics.duration.labels(name).observe(time.monotonic() - started)
    # A failed run's task raised RunFailedError, which Celery hands here as the retval; any
    # other failure of the task left no run outcome to count.
    if isinstance(retval, RunFailedError):
        retval = retval.status
    elif state != "SUCCESS":
        return
    if name == EXECUTE_TASK:
        rule = getattr(task.request, "shadow", None) or "unknown"
        metrics.runs.labels(rule, str(retval) if retval else "none").inc()


# --- the metrics server ---------------------------------------------------------------------


def _enable_multiprocess() -> str:
    """Point prometheus_client at a per-worker directory; returns it."""
    given = os.environ.get(MULTIPROC_ENV)
    if given:
        os.makedirs(given, exist_ok=True)
        for stale in glob.glob(os.path.join(given, "*.db")):  # a previous run's pool processes
            os.remove(stale)
        directory = given
    else:
        directory = tempfile.mkdtemp(prefix="ade-worker-metrics-")
        os.environ[MULTIPROC_ENV] = directory  # forked pool processes inherit it
        _state.owns_dir = True
    from prometheus_client import values

    # prometheus_client picks its value class when first imported; if anything imported it
    # before the variable was set, choose again (metrics are created only after this point).
    values.ValueClass = values.get_value_class()  # type: ignore[no-untyped-call]
    return directory


def _on_worker_init(sender: object = None, **_: object) -> None:
    runtime = getattr(getattr(sender, "app", None), "ade_runtime", None)
    settings: Settings | None = getattr(runtime, "settings", None)
    if settings is None or settings.worker_metrics_port is None:
        return
    from prometheus_client import CollectorRegistry, start_http_server
    from prometheus_client.multiprocess import MultiProcessCollector

    directory = _enable_multiprocess()
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=directory)  # type: ignore[no-untyped-call]
    try:
        server, _thread = start_http_server(
            settings.worker_metrics_port, addr="0.0.0.0", registry=registry
        )
    except OSError as exc:  # the port is taken: run the worker anyway, without metrics
        log.error("worker metrics: cannot listen on %s: %s", settings.worker_metrics_port, exc)
        return
    _state.metrics_dir = directory
    _state.server = server
    log.info("worker metrics on port %s", settings.worker_metrics_port)


def _on_process_shutdown(pid: int | None = None, **_: object) -> None:
    if _state.metrics_dir is None:
        return
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(pid or os.getpid(), _state.metrics_dir)  # type: ignore[no-untyped-call]


def _on_worker_shutdown(**_: object) -> None:
    if _state.server is not None:
        _state.server.shutdown()
        _state.server = None
    if _state.owns_dir and _state.metrics_dir is not None:
        shutil.rmtree(_state.metrics_dir, ignore_errors=True)
        _state.metrics_dir = None


# --- broker queue depths --------------------------------------------------------------------


def queue_depths(
    broker_url: str,
    queues: Iterable[str],
    *,
    timeout: float = 2.0,
    transport_options: Mapping[str, object] | None = None,
) -> dict[str, int]:
    """Messages waiting in each queue (published, not yet taken by a worker); raises when the
    broker does not answer within about `timeout` seconds.

    Redis: kombu keeps a queue as lists, one per priority step: `<queue>` for priority 0 and
    `<queue>\\x06\\x16<n>` for the other steps (3, 6, 9), all under the transport's
    `global_keyprefix`; LLEN of each, summed, in one pipeline. Other brokers (RabbitMQ, the
    in-memory transport): a passive queue declare through kombu, whose answer carries the
    message count; a queue that does not exist holds no message.
    """
    names = list(dict.fromkeys(queues))
    options = dict(transport_options or {})
    if urlsplit(broker_url).scheme in ("redis", "rediss"):
        return _redis_depths(broker_url, names, timeout, options)
    return _kombu_depths(broker_url, names, timeout, options)


def _redis_depths(
    url: str, names: list[str], timeout: float, options: dict[str, object]
) -> dict[str, int]:
    import redis
    from kombu.transport.redis import PRIORITY_STEPS, Channel

    prefix = str(options.get("global_keyprefix", ""))
    separator = str(options.get("sep", Channel.sep))
    # kombu's own option, a list of priorities; kombu reads it the same unchecked way.
    steps = list(cast("Iterable[int]", options.get("priority_steps", PRIORITY_STEPS)))
    client = redis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout)
    try:
        with client.pipeline(transaction=False) as pipe:
            for name in names:
                for step in steps:
                    key = f"{name}{separator}{step}" if step else name
                    pipe.llen(prefix + key)
            sizes = pipe.execute()
    finally:
        client.close()
    per_queue = len(steps)
    return {
        name: sum(int(n) for n in sizes[i * per_queue : (i + 1) * per_queue])
        for i, name in enumerate(names)
    }


def _kombu_depths(
    url: str, names: list[str], timeout: float, options: dict[str, object]
) -> dict[str, int]:
    from kombu.connection import Connection

    options.setdefault("read_timeout", timeout)
    options.setdefault("write_timeout", timeout)
    depths: dict[str, int] = {}
    with Connection(url, connect_timeout=timeout, transport_options=options) as connection:  # type: ignore[no-untyped-call]
        connection.ensure_connection(max_retries=1, timeout=timeout)
        for name in names:
            channel = connection.channel()
            try:
                _, count, _ = channel.queue_declare(queue=name, passive=True)
                depths[name] = int(count)
            except connection.channel_errors:  # no such queue (RabbitMQ closes the channel)
                depths[name] = 0
            finally:
                try:
                    channel.close()
                except Exception:  # already closed by the broker
                    pass
    return depths
