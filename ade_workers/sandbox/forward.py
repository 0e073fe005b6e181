"""Inside a sandbox whose network holds only a loopback: forward TCP ports on it to Unix sockets
the engine bound in, then run the command and exit with its status.

    python -I -S forward.py PORT=SOCKET [PORT=SOCKET ...] -- ARGV...

An agent CLI speaks HTTP to `http://127.0.0.1:PORT` (its model proxy) and cannot speak to a Unix
socket, while a sandbox with a network namespace of its own reaches no host address. So each
connection to PORT inside is forwarded to SOCKET, a socket of the engine's (`bridge.py`) that the
sandbox binds in; nothing else of the host's network is reachable.

Standard library only: this file runs as a program inside the sandbox (an engine-owned copy,
`helpers.py`), with no site packages; the worker imports `splice` from it for its end.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import sys
import threading

_CHUNK = 65536


def _pump(source: socket.socket, target: socket.socket) -> None:
    try:
        while data := source.recv(_CHUNK):
            target.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            target.shutdown(socket.SHUT_WR)


def splice(one: socket.socket, other: socket.socket) -> None:
    """Copy bytes both ways until both sides have closed; then close both."""
    back = threading.Thread(target=_pump, args=(other, one), daemon=True)
    back.start()
    _pump(one, other)
    back.join()
    one.close()
    other.close()


def _serve(server: socket.socket, path: str) -> None:
    while True:
        client, _ = server.accept()
        threading.Thread(target=_connect, args=(client, path), daemon=True).start()


def _connect(client: socket.socket, path: str) -> None:
    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        upstream.connect(path)
    except OSError:
        upstream.close()
        client.close()
        return
    splice(client, upstream)


def main(argv: list[str]) -> int:
    if "--" not in argv:
        sys.stderr.write("usage: forward.py PORT=SOCKET ... -- ARGV...\n")
        return 2
    split = argv.index("--")
    for spec in argv[:split]:
        port, path = spec.split("=", 1)
        server = socket.create_server(("127.0.0.1", int(port)))
        threading.Thread(target=_serve, args=(server, path), daemon=True).start()
    try:
        # Descriptors the sandbox was given pass on (a supervisor's socket); ours do not.
        command = subprocess.Popen(argv[split + 1 :], close_fds=False)
    except OSError as exc:
        sys.stderr.write(f"could not start {argv[split + 1]!r}: {exc.strerror}\n")
        return 127
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda number, _: command.send_signal(number))
    code = command.wait()
    return 128 - code if code < 0 else code  # a signal's death as a shell reports it


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
