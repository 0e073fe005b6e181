"""The JSON-RPC framing of a codex app-server connection, against a stand-in process that
answers over stdio: calls are numbered and their responses matched back, lines that are not
JSON are kept with codex's stderr, and codex's EOF ends the inbox."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from ade_workers.agents.cli.codex_rpc import RpcConnection
from ade_workers.containment.contained_process import ContainedProcess

# Answers each request line with a response to its id, after one line that is not JSON, and
# writes a line to stderr; exits at EOF on stdin.
STAND_IN = """
import json, sys
print("starting up", flush=True)
print("a warning", file=sys.stderr, flush=True)
for line in sys.stdin:
    message = json.loads(line)
    print(json.dumps({"id": message["id"], "result": {"echo": message["method"]}}), flush=True)
print("{not json", flush=True)
"""


def test_a_call_is_numbered_and_its_response_matched_back(tmp_path: Path) -> None:
    # Given a connection to a process that answers every request
    with ContainedProcess(
        [sys.executable, "-c", STAND_IN], cwd=str(tmp_path), env=dict(os.environ),
        kill_grace=1, stdin=True, separate_stderr=True,
    ) as process:  # fmt: skip
        rpc = RpcConnection(process)

        # When two calls are made and codex's stdin is closed
        rpc.call("initialize", {"clientInfo": {"name": "test"}})
        rpc.call("thread/start", {})
        first, second = rpc.inbox.get(timeout=10), rpc.inbox.get(timeout=10)
        rpc.close()
        end = rpc.inbox.get(timeout=10)
        rpc.join(timeout=10)
        process.finish()

    # Then each response names the method it answers, once, and EOF ends the inbox
    assert first is not None and second is not None
    assert (first["id"], second["id"]) == (1, 2)
    assert rpc.answered(second) == "thread/start"
    assert rpc.answered(first) == "initialize"
    assert rpc.answered(first) == "?"  # answered already
    assert end is None
    # And what was not a JSON message is kept with stderr for the session's error
    assert {"starting up", "a warning", "unparsable: {not json"} <= set(rpc.stderr)


def test_a_write_to_a_codex_that_is_gone_is_noted_not_raised(tmp_path: Path) -> None:
    # Given a connection to a process that exits at once
    with ContainedProcess(
        [sys.executable, "-c", "pass"], cwd=str(tmp_path), env=dict(os.environ), kill_grace=1,
        stdin=True, separate_stderr=True,
    ) as process:  # fmt: skip
        rpc = RpcConnection(process)
        assert rpc.inbox.get(timeout=10) is None
        process.finish()

        # When the session writes to it
        rpc.send({"method": "initialized"})
        rpc.close()
        rpc.join(timeout=10)

    # Then the failure is kept as output, not raised
    assert any(line.startswith("write to codex failed") for line in rpc.stderr)
