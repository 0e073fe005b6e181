"""Claude Code's PreToolUse and PostToolUse hook: asks the worker whether a tool call may run,
and tells it when one has run.

The engine writes this program into the session's own settings (`--settings`), so Claude Code
runs it before every tool call with the call on stdin. It sends the call to the worker's decision
socket (the path is its one argument), and prints the engine's verdict in the hook protocol's
shape (`hookSpecificOutput.permissionDecision`: allow or deny, with the reason the model sees).
After a call ran (`PostToolUse`, with its `tool_response`) it sends that too and prints nothing:
the worker journals the finished call at once (Claude's own stream shows a result only with the
next model answer), so a session resumed after its worker died never runs it again.

It fails closed: if the worker cannot be reached, answers nonsense or takes longer than
`DECISION_TIMEOUT` in all, it exits 2, which Claude Code treats as a blocking error (the call is
refused and the model sees stderr). Only if this program cannot run at all (no interpreter) does
the call fall to Claude's own permission mode, which the engine sets to `plan` or `default`
(never a bypass): headless Claude then still refuses writes and commands, but lets reads inside
its working directory through.

Standard library only: it runs as `python -I -S claude_hook.py SOCKET`, with no site packages.
"""

from __future__ import annotations

import json
import socket
import sys
import time

#: Under Claude Code's own hook timeout (the engine's settings give it 30 s).
DECISION_TIMEOUT = 20.0
_BLOCK = 2


def ask_worker(path: str, call: dict[str, object]) -> dict[str, object]:
    """Send one call to the decision socket and return its `{verdict, reason}` reply, all of
    it within `DECISION_TIMEOUT` (a timeout is a failure, and failures refuse the call)."""
    deadline = time.monotonic() + DECISION_TIMEOUT

    def left() -> float:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"no decision within {DECISION_TIMEOUT:g}s")
        return remaining

    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(left())
        sock.connect(path)
        sock.settimeout(left())
        sock.sendall(json.dumps(call).encode() + b"\n")
        reply = b""
        while not reply.endswith(b"\n"):
            sock.settimeout(left())
            chunk = sock.recv(65536)
            if not chunk:
                break
            reply += chunk
    answer = json.loads(reply)
    if not isinstance(answer, dict) or answer.get("verdict") not in ("allow", "deny"):
        raise ValueError(f"the worker answered {reply[:200]!r}")
    return answer


def main(argv: list[str]) -> int:
    try:
        call = json.load(sys.stdin)
        answer = ask_worker(argv[1], call)
    except Exception as exc:  # fail closed, whatever went wrong
        sys.stderr.write(f"ADE Tasks could not decide this tool call ({exc}); it is refused\n")
        return _BLOCK
    if isinstance(call, dict) and call.get("hook_event_name") == "PostToolUse":
        return 0  # the call has run: nothing to decide
    output = {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": answer["verdict"],
            "permissionDecisionReason": str(answer.get("reason", "")),
        }
    }
    sys.stdout.write(json.dumps(output) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
