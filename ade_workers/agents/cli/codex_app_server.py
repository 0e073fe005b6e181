"""One Codex session driven over `codex app-server` (JSON-RPC on stdio), the engine answering
every approval codex asks for.

`run_codex_session` writes a per-session CODEX_HOME (`codex_home`: config.toml, an execpolicy
rules file, an empty HOME), starts `codex app-server --strict-config` in a container of its own
(`ContainedProcess`, stdin and stderr as pipes), does the handshake (`initialize`,
`thread/start`, `turn/start`) over `codex_rpc` and then answers every server request: approvals
(`codex_requests.approval_request`) by the engine's `decide`, anything else refused. Items
become the neutral run events the other providers record (`codex_requests.item_events`); token
usage is checked after every model response. What codex 0.169 lets the engine
enforce, verified against the real binary by tests/integration/test_codex_real.py:

Per policy item, support in brackets:

- Commands (`bash` in denied/allowed tools, the fallback) [enforced, one gap]:
  `approval_policy = "on-request"` plus a rules file with a `prompt` rule for every program name
  on PATH, in the worktree and in a base list (shells; `.`, `source`, `eval`; codex's "known
  safe" `cat`, `ls`, `grep`, ...); a script that is not a plain word list is judged as `bash`.
  Each command is an `item/commandExecution/requestApproval` that `decide` answers. The gap:
  rules match basenames, so an executable outside PATH and the worktree under a name no rule
  lists runs unasked, inside the sandbox.
- File changes (`write_file`, `edit_file`, `sandbox_root`): `item/fileChange/requestApproval`
  with the change's absolute paths (codex resolves `..`). Read-only sandbox [enforced]: every
  change asks. Workspace-write [best-effort]: a change outside the writable roots (absolute,
  `..`, `.git/`) asks; one inside the worktree (`.ade/` included) is applied unasked.
- What commands may write [enforced by codex's bubblewrap sandbox]: read-only writes nothing,
  even for an approved command; workspace-write the worktree only (not /tmp or $TMPDIR, `.git`
  read-only); network off (`network_access = false`).
- What may be read [unsupported]: the sandbox does not confine reads.
- `max_tokens`, `max_cost_usd`: every `thread/tokenUsage/updated` (after each model response)
  goes to `over_budget`; a reason kills the container at once. codex asks for a tool call as soon
  as it streams, before that response's usage is known. (The engine's sessions meter at their
  model proxy instead, `codex_session`.)
- Deadline, cancel [enforced]: polled every 50 ms; the container is killed (TERM, then KILL
  after `kill_grace`), codex and every command it started.
- Credentials [enforced]: the key given (the engine gives its model proxy's per-session token,
  never the provider's key) is in `ADE_CODEX_API_KEY` (the provider's `env_key`), for the codex
  process only; `OPENAI_API_KEY` and `CODEX_API_KEY` are dropped; commands get
  `shell_environment_policy.inherit = "core"`, without the key.
- No user or project settings [enforced; a machine's /etc/codex is outside reach]: CODEX_HOME
  and HOME are per-session dirs; a worktree's `.codex/` (an untrusted project) is not loaded;
  AGENTS.md is off; hooks, apps, plugins, memories, goals, sub-agents, web search, image tools
  and shell snapshots are off; no MCP servers; `--strict-config` refuses unknown keys.
- Other server requests (user input, MCP elicitation, permissions, dynamic tools) [enforced]:
  refused with a JSON-RPC error and recorded as a `deny` decision.
- `max_turns` [unsupported]: one app-server turn, no limit on model calls within it.
- `ask`: answered as a decline; `CodexOutcome.pending` holds the first such request.
- A denial's reason is recorded (`agent.tool_decision`); codex tells the model only "rejected
  by user".
"""

from __future__ import annotations

import os
import queue
import shutil
import time
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from ade_tasks.agents.policy import Decision
from ade_workers.agents.cli.codex_home import (
    KEY_VARIABLE,
    PROVIDER,
    CodexSandboxMode,
    Sandbox,
    write_session_home,
)
from ade_workers.agents.cli.codex_requests import (
    CodexRequest,
    Message,
    approval_request,
    item_events,
    request_call,
)
from ade_workers.agents.cli.codex_rpc import RpcConnection
from ade_workers.agents.cli.setup import COMPLETED_EVENT, JOURNAL_CHARS, call_id, cli_install
from ade_workers.containment.agent_user import AgentUser
from ade_workers.containment.contained_process import ContainedProcess
from ade_workers.sandbox.bridge import UnixBridge
from ade_workers.sandbox.egress import PROXY_VARIABLES
from ade_workers.sandbox.layout import Forward
from ade_workers.sandbox.layout import Sandbox as OsSandbox
from ade_workers.sandbox.scratch import make_directory

CodexStatus = Literal["completed", "failed", "timed_out", "budget_exceeded"]
Record = Callable[[str, Message], None]

CLIENT_NAME = "ade-tasks"
#: Notifications the session never looks at (streaming deltas), suppressed at the source.
_QUIET = [
    "item/agentMessage/delta",
    "item/plan/delta",
    "item/commandExecution/outputDelta",
    "item/fileChange/outputDelta",
    "item/reasoning/summaryTextDelta",
    "item/reasoning/summaryPartAdded",
    "item/reasoning/textDelta",
    "command/exec/outputDelta",
    "account/rateLimits/updated",
]


@dataclass
class CodexOutcome:
    """How a codex session ended, what it said last and what it used."""

    status: CodexStatus
    final_text: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    error: str | None = None
    pending: CodexRequest | None = None
    thread_id: str | None = None
    exit_code: int | None = None
    stderr: list[str] = field(default_factory=list)


class _Ended(Exception):
    """Ends the conversation with a status (control flow inside the session, never escapes)."""

    def __init__(self, status: CodexStatus, error: str | None) -> None:
        super().__init__(error)
        self.status, self.error = status, error


class _Session:
    """The client side of one app-server connection: what the engine answers and records."""

    def __init__(
        self,
        rpc: RpcConnection,
        *,
        worktree: Path,
        decide: Callable[[CodexRequest], Decision],
        record: Record,
        over_budget: Callable[[int, int], str | None],
    ) -> None:
        self.rpc = rpc
        self.worktree = worktree
        self.decide, self.record, self.over_budget = decide, record, over_budget
        self.outcome = CodexOutcome("failed")
        self.items: dict[str, Message] = {}
        self.allowed: dict[str, CodexRequest] = {}  # by item id, until the item completes
        self.turn_done = False

    def handle(self, message: Message, on_result: Callable[[str, Message | None], None]) -> None:
        method = message.get("method")
        if method is None:  # a response to one of our calls
            called = self.rpc.answered(message)
            if "error" in message:
                error = message["error"]
                text = error.get("message") if isinstance(error, dict) else error
                raise _Ended("failed", f"codex refused {called}: {text}")
            on_result(called, message.get("result"))
        elif "id" in message:
            self.answer(message["id"], str(method), message.get("params") or {})
        else:
            self.notice(str(method), message.get("params") or {})

    def answer(self, request_id: object, method: str, params: Message) -> None:
        """Answer a request codex sent: an approval by the engine's decision, others refused."""
        request = approval_request(method, params, self.items, self.worktree)
        if request is None:
            self.record("agent.tool_decision", {
                "id": str(params.get("itemId", "")), "tool": method, "verdict": "deny",
                "reason": f"ADE does not answer codex's {method}",
            })  # fmt: skip
            self.rpc.send({
                "id": request_id,
                "error": {"code": -32601, "message": f"ADE Tasks does not support {method}"},
            })  # fmt: skip
            return
        if request.kind == "file_change" and not request.paths:
            decision = Decision("deny", "codex asked to change files without naming them")
        else:
            decision = self.decide(request)
        if decision.verdict == "ask" and self.outcome.pending is None:
            self.outcome.pending = request
        self.record("agent.tool_decision", {
            "id": request.id, "tool": request.kind, "verdict": decision.verdict,
            "reason": decision.reason,
            "input": {"command": request.command} if request.kind == "command"
            else {"paths": list(request.paths)},
        })  # fmt: skip
        if decision.verdict == "allow":
            self.allowed[request.id] = request
        verdict = "accept" if decision.verdict == "allow" else "decline"
        if method in ("execCommandApproval", "applyPatchApproval"):  # v1 wording
            verdict = "approved" if verdict == "accept" else "denied"
        self.rpc.send({"id": request_id, "result": {"decision": verdict}})

    def journal_completion(self, item: Message) -> None:
        """Journal a call the engine allowed as finished (`agent.tool_completed`), by the id
        its approval had: a resumed session declines the same call instead of running it
        again. A call codex ran without asking is not the engine's to replay."""
        request = self.allowed.pop(str(item.get("id")), None)
        ran = item.get("status") == "completed" or item.get("exitCode") is not None
        if request is None or not ran:  # declined, or never started
            return
        tool, tool_input = request_call(request)
        output = item.get("aggregatedOutput") if request.kind == "command" else "applied"
        self.record(
            COMPLETED_EVENT,
            {
                "id": call_id(tool, tool_input),
                "cli_id": request.id,
                "tool": tool,
                "output": str(output or "")[:JOURNAL_CHARS],
            },
        )

    def notice(self, method: str, params: Message) -> None:
        if method in ("item/started", "item/completed"):
            item = params.get("item")
            if isinstance(item, dict):
                self.items[str(item.get("id"))] = item
                done = method == "item/completed"
                for kind, data in item_events(item, done=done):
                    self.record(kind, data)
                if done:
                    self.journal_completion(item)
                if done and item.get("type") == "agentMessage":
                    self.outcome.final_text = str(item.get("text", ""))
        elif method == "thread/tokenUsage/updated":
            total = (params.get("tokenUsage") or {}).get("total") or {}
            self.outcome.input_tokens = int(total.get("inputTokens") or 0)
            self.outcome.output_tokens = int(total.get("outputTokens") or 0)
            self.outcome.cached_input_tokens = int(total.get("cachedInputTokens") or 0)
            reason = self.over_budget(self.outcome.input_tokens, self.outcome.output_tokens)
            if reason is not None:
                raise _Ended("budget_exceeded", reason)
        elif method == "turn/completed":
            turn = params.get("turn") or {}
            self.turn_done = True
            if turn.get("status") != "completed":
                error = turn.get("error") or {}
                message = error.get("message") if isinstance(error, dict) else None
                raise _Ended(
                    "failed", f"codex's turn {turn.get('status')}: {message or 'no reason given'}"
                )
        elif method == "error":
            error = params.get("error") or {}
            self.record(
                "agent.error",
                {"message": error.get("message"), "will_retry": params.get("willRetry")},
            )
        elif method in ("configWarning", "warning", "deprecationNotice"):
            summary = str(params.get("summary") or params.get("message") or "")
            if summary.startswith("Invalid configuration"):
                # codex would go on with its defaults (no approvals, no engine provider).
                raise _Ended("failed", f"codex rejected the session's config: {summary} "
                             f"{params.get('details') or ''}".strip())  # fmt: skip
            self.record("agent.cli_warning", {"message": summary})


def run_codex_session(
    *,
    binary: str,
    worktree: Path,
    codex_home: Path,
    env: Mapping[str, str],
    model: str,
    prompt: str,
    base_url: str,
    api_key: str,
    sandbox: Sandbox,
    decide: Callable[[CodexRequest], Decision],
    record: Record,
    should_stop: Callable[[], bool],
    deadline: float,
    over_budget: Callable[[int, int], str | None],
    kill_grace: float,
    user: AgentUser | None = None,
    outer: OsSandbox | None = None,
) -> CodexOutcome:
    """Run one codex turn on `prompt` in `worktree`, contained, until it completes, fails, is
    stopped, passes `deadline` (time.monotonic) or goes over budget. As `user`, if given: it
    owns CODEX_HOME and HOME (codex writes its sessions and logs there); the config and rules
    files in it are the worker's, but the user could replace them, so it is the sandbox that
    keeps the session's own commands away from them (CODEX_HOME is no writable root)."""
    path = env.get("PATH", os.defpath)
    # Inside the engine's sandbox (the floor: plan's worktree is read-only there) codex's own
    # would nest a second one, which its helper binaries cannot make under a /tmp home.
    mode: CodexSandboxMode = "danger-full-access" if outer is not None else sandbox
    home = write_session_home(
        codex_home, model=model, base_url=base_url, sandbox=mode, path=path, worktree=worktree,
        command_env={k: env[k] for k in (*PROXY_VARIABLES, "NO_PROXY", "no_proxy") if k in env},
    )  # fmt: skip
    if user is not None:
        user.hand_over(home)
    child_env = {
        **{k: v for k, v in env.items() if k not in ("OPENAI_API_KEY", "CODEX_API_KEY")},
        "PATH": path,
        "HOME": str(home),
        "CODEX_HOME": str(codex_home),
        KEY_VARIABLE: api_key,
        "NO_COLOR": "1",
        "RUST_LOG": env.get("RUST_LOG", "error"),
    }
    argv = [binary, "app-server", "--strict-config", "--listen", "stdio://"]
    if time.monotonic() >= deadline:
        return CodexOutcome("timed_out", error="the session's deadline passed before codex started")
    if should_stop():
        return CodexOutcome("failed", error="codex was cancelled before it started")
    with ExitStack() as bridges:
        if outer is not None:
            argv = _sandboxed(argv, outer, worktree, codex_home, base_url, bridges, user)
        try:
            process = ContainedProcess(
                argv, cwd=str(worktree), env=child_env, kill_grace=kill_grace, stdin=True,
                separate_stderr=True, user=user.ids if user else None,
            )  # fmt: skip
        except OSError as exc:
            return CodexOutcome("failed", error=f"codex could not be started (`{binary}`): {exc}")
        with process:
            rpc = RpcConnection(process)
            session = _Session(
                rpc, worktree=worktree, decide=decide, record=record, over_budget=over_budget
            )
            status, error = _converse(session, worktree, model, mode, prompt, should_stop, deadline)
            outcome = session.outcome
            outcome.status, outcome.error = status, error
            _end(session, graceful=status == "completed", kill_grace=kill_grace)
            try:
                outcome.exit_code = process.finish()
            except OSError as exc:
                outcome.exit_code = None
                if outcome.error is None and status == "completed":
                    outcome.error = f"codex's container did not report: {exc}"
            rpc.join(timeout=kill_grace + 5)
            outcome.stderr = list(rpc.stderr)
            if status == "failed" and rpc.stderr and error and "exited" in error:
                outcome.error = f"{error}; last output: {rpc.stderr[-1]}"
    return outcome


def _sandboxed(
    argv: list[str],
    outer: OsSandbox,
    worktree: Path,
    codex_home: Path,
    base_url: str,
    bridges: ExitStack,
    user: AgentUser | None,
) -> list[str]:
    """codex's command line inside the engine's sandbox: CODEX_HOME read-write, and the model
    endpoint's port (on 127.0.0.1) forwarded in through a Unix socket (the agent user's, if
    any: the directory only lets it in)."""
    endpoint = urlsplit(base_url)
    sockets = make_directory("codex-sockets-")
    bridges.callback(shutil.rmtree, sockets, True)
    if user is not None:
        sockets.chmod(0o711)
    forwards: tuple[Forward, ...] = ()
    if endpoint.hostname in ("127.0.0.1", "localhost") and endpoint.port:
        socket_path = sockets / "model.sock"
        target = ("127.0.0.1", endpoint.port)
        bridges.enter_context(UnixBridge(socket_path, target, owner=user))
        forwards = (Forward(endpoint.port, socket_path),)
    install = cli_install(argv[0], os.environ.get("PATH"))
    layout = replace(
        outer,
        read_write=(*outer.read_write, codex_home),
        read_only=(*outer.read_only, sockets, *([install] if install else [])),
        forwards=(*outer.forwards, *forwards),
    )
    return layout.command(argv, str(worktree))


def _converse(
    session: _Session,
    worktree: Path,
    model: str,
    sandbox: CodexSandboxMode,
    prompt: str,
    should_stop: Callable[[], bool],
    deadline: float,
) -> tuple[CodexStatus, str | None]:
    """Handshake, one turn, and every message until the turn ends: (status, error)."""

    def on_result(method: str, result: Message | None) -> None:
        if method == "initialize":
            session.rpc.send({"method": "initialized"})
            session.rpc.call("thread/start", {
                "cwd": str(worktree), "model": model, "modelProvider": PROVIDER,
                "approvalPolicy": "on-request", "approvalsReviewer": "user", "sandbox": sandbox,
                "ephemeral": True,
            })  # fmt: skip
        elif method == "thread/start":
            thread_id = str(((result or {}).get("thread") or {}).get("id"))
            session.outcome.thread_id = thread_id
            session.rpc.call("turn/start", {
                "threadId": thread_id, "input": [{"type": "text", "text": prompt}],
            })  # fmt: skip

    session.rpc.call("initialize", {
        "clientInfo": {"name": CLIENT_NAME, "version": "1"},
        "capabilities": {"optOutNotificationMethods": _QUIET},
    })  # fmt: skip
    try:
        while not session.turn_done:
            if should_stop():
                return "failed", "codex was cancelled"
            left = deadline - time.monotonic()
            if left <= 0:
                return "timed_out", "codex was killed at the session's deadline"
            try:
                message = session.rpc.inbox.get(timeout=min(left, 0.05))
            except queue.Empty:
                continue
            if message is None:
                return "failed", "codex app-server exited before the turn completed"
            session.handle(message, on_result)
    except _Ended as ended:
        return ended.status, ended.error
    return "completed", None


def _end(session: _Session, *, graceful: bool, kill_grace: float) -> None:
    """Close codex's stdin (it exits at EOF); kill all of it unless it went by itself within
    the grace of a completed session."""
    session.rpc.close()
    if not (graceful and session.rpc.process.wait(kill_grace)):
        session.rpc.process.stop()
