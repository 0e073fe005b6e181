"""`ade-tasks api --workers N`: N uvicorn processes, each listening on its own socket.

uvicorn's own `--workers` shares one listening socket between its processes, and the process
that wakes first accepts every connection waiting. A burst of keep-alive connections (a
reverse proxy's upstream pool, a load test, GitHub retrying a backlog) can then land on one
process while the others idle, and one process is one core: its GIL caps it.

On Linux each process here accepts from its own socket instead, bound with SO_REUSEPORT, and
the kernel spreads new connections over the sockets evenly. The parent checks first that
nothing else holds the port (SO_REUSEPORT would otherwise let a second `ade-tasks api` share
it silently), opens every socket before any process starts (so the first process up does not
take all the first connections) and keeps them open: a process that dies is restarted on the
same socket, and connections queued for it wait instead of being refused. A process that fails
during start-up stops everything; SIGTERM/SIGINT stop the processes gracefully. Elsewhere
uvicorn's `--workers` is used.

Every process serves with `ade_api.http.header_timeout` (unless `options` name another `http`
protocol): a connection that has not sent a request's headers within 10 s is closed.
"""

from __future__ import annotations

import ctypes
import logging
import multiprocessing
import multiprocessing.connection
import signal
import socket
import sys
import time
from types import FrameType
from typing import TypedDict, Unpack

from uvicorn.config import STARTUP_FAILURE

from ade_api.http.header_timeout import HTTP_PROTOCOL
from ade_tasks.errors import AdeError

log = logging.getLogger(__name__)

#: A process that died is started again, at most once a second per process. One that failed
#: to start (uvicorn's exit status 3: the app did not import or build) would fail the same way
#: again, so everything stops instead.
RESTART_SECONDS = 1.0
WATCH_SECONDS = 0.5  # how often dead processes and signals are looked at
PR_SET_PDEATHSIG = 1  # prctl(2)
STOP_SECONDS = 30.0  # uvicorn's graceful shutdown; then the stragglers are killed
BACKLOG = 2048  # uvicorn's default


class PortInUseError(AdeError):
    """Something else listens on the API's address."""


class ServeOptions(TypedDict, total=False):
    """The uvicorn.Config options `ade-tasks api` sets besides the app, host and port."""

    log_level: str
    access_log: bool
    http: str  # a protocol class's import string
    log_config: dict[str, object] | None
    backlog: int


class ProcessConfig(ServeOptions):
    """Every process's uvicorn.Config: the app factory's import string, the address, the rest."""

    app: str
    factory: bool
    host: str
    port: int


SocketAddress = tuple[str, int] | tuple[str, int, int, int] | tuple[int, bytes]
"""An address `getaddrinfo` gives: IPv4 (host, port), IPv6 (host, port, flow, scope), raw."""


def serve(app: str, *, workers: int, host: str, port: int, **options: Unpack[ServeOptions]) -> None:
    """Serve the `app` factory (an import string) from `workers` processes on host:port;
    `options` are uvicorn.Config's. Returns when the processes have stopped."""
    options.setdefault("http", HTTP_PROTOCOL)
    if workers == 1 or not hasattr(socket, "SO_REUSEPORT") or sys.platform != "linux":
        import uvicorn

        uvicorn.run(app, factory=True, workers=workers, host=host, port=port, **options)
        return
    if port == 0:
        raise PortInUseError("--workers needs a fixed port: each process binds it on its own")
    _check_free(host, port)
    config: ProcessConfig = {"app": app, "factory": True, "host": host, "port": port, **options}
    Supervisor(workers, config).run()


def _check_free(host: str, port: int) -> None:
    family, address = _address(host, port)
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT is no owner
        try:
            probe.bind(address)
        except OSError as exc:
            raise PortInUseError(
                f"cannot listen on {host}:{port} ({exc.strerror}); stop what uses it or pick "
                "another port (--port, ADE_API_PORT)"
            ) from None


def _address(host: str, port: int) -> tuple[socket.AddressFamily, SocketAddress]:
    family, _type, _proto, _name, address = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    return family, address


def _listening(host: str, port: int, backlog: int) -> socket.socket:
    family, address = _address(host, port)
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(address)
    sock.listen(backlog)
    return sock


def worker_main(config: ProcessConfig, sock: socket.socket) -> None:
    """One API process: uvicorn accepting from its own socket until SIGTERM (or until the
    supervisor dies: Linux sends SIGTERM then, so no orphan keeps the port)."""
    import uvicorn

    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    server_config = uvicorn.Config(**config)
    try:  # uvicorn exits with STARTUP_FAILURE only for some failures; any app that cannot be built
        server_config.load()
    except SystemExit:
        raise
    except Exception:
        logging.getLogger("uvicorn.error").exception("the API app could not be built")
        sys.exit(STARTUP_FAILURE)
    uvicorn.Server(server_config).run(sockets=[sock])


class Supervisor:
    """Starts, watches and stops the API processes."""

    def __init__(self, workers: int, config: ProcessConfig) -> None:
        self.config = config
        backlog = config.get("backlog", BACKLOG)
        self.sockets = [_listening(config["host"], config["port"], backlog) for _ in range(workers)]
        self.context = multiprocessing.get_context("spawn")  # a clean interpreter each
        self.processes: list[tuple[multiprocessing.process.BaseProcess, float]] = []
        self.stopping = False
        self.failed: str | None = None

    def run(self) -> None:
        previous = {sig: signal.signal(sig, self._stop) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            self.processes = [self._start(sock) for sock in self.sockets]
            where = f"http://{self.config['host']}:{self.config['port']}"
            sys.stderr.write(f"serving {where} from {len(self.sockets)} processes\n")
            while not self.stopping:
                # Only live processes: a dead one's sentinel is always ready (a busy loop).
                alive = [process.sentinel for process, _ in self.processes if process.is_alive()]
                multiprocessing.connection.wait(alive, timeout=WATCH_SECONDS)
                self._replace_exited()
        finally:
            self._stop_all()
            for sock in self.sockets:
                sock.close()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        if self.failed:
            raise AdeError(self.failed)

    def _start(self, sock: socket.socket) -> tuple[multiprocessing.process.BaseProcess, float]:
        process = self.context.Process(target=worker_main, args=(self.config, sock), name="ade-api")
        process.start()
        return process, time.monotonic()

    def _replace_exited(self) -> None:
        for index, (process, started) in enumerate(self.processes):
            if process.is_alive() or self.stopping:
                continue
            if process.exitcode == STARTUP_FAILURE:
                self.failed = "an API process failed to start; its log above says why"
                self.stopping = True
                return
            if time.monotonic() - started < RESTART_SECONDS:
                continue
            log.warning(
                "API process %s exited with %s; starting another", process.pid, process.exitcode
            )
            self.processes[index] = self._start(self.sockets[index])

    def _stop(self, _signum: int, _frame: FrameType | None) -> None:
        self.stopping = True

    def _stop_all(self) -> None:
        for process, _ in self.processes:
            if process.is_alive():
                process.terminate()  # SIGTERM: uvicorn finishes the requests in flight
        deadline = time.monotonic() + STOP_SECONDS
        for process, _ in self.processes:
            process.join(max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                process.kill()
                process.join(5)
