"""One Codex session driven over `codex app-server` (JSON-RPC on stdio), the engine answering
every approval codex asks for.

`run_codex_session` writes a per-session CODEX_HOME (config.toml, an execpolicy rules file, an
empty HOME), starts `codex app-server --strict-config` in a container of its own
(`ContainedProcess`, stdin and stderr as pipes), does the handshake (`initialize`,
`thread/start`, `turn/start`) and then answers every server request: approvals by the engine's
`decide`, anything else refused. Items become the neutral run events the other providers
record; token usage is checked after every model response. What codex 0.169 lets the engine
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

import contextlib
import json
import os
import queue
import re
import shlex
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Literal

from ade_tasks.agents.policy import Decision
from ade_workers.agent_user import AgentUser
from ade_workers.supervisor import ContainedProcess

Sandbox = Literal["read-only", "workspace-write"]
CodexStatus = Literal["completed", "failed", "timed_out", "budget_exceeded"]
RequestKind = Literal["command", "file_change"]

#: The variable that carries the provider key; only the codex process gets it, and codex keeps
#: it out of the commands it runs (`shell_environment_policy.inherit = "core"`).
KEY_VARIABLE = "ADE_CODEX_API_KEY"
PROVIDER = "ade"
RULES_FILE = "ade.rules"
CLIENT_NAME = "ade-tasks"
STDERR_LINES = 50
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
#: Programs every rules file names, found on PATH or not: shells and their builtins that run
#: other code (`.`, `source`, `eval`, ...), interpreters, codex's own "known safe" list (which
#: it would otherwise run without asking) and common tools.
BASE_PROGRAMS = (
    "bash sh zsh dash fish ksh env sudo su nohup setsid timeout xargs time nice exec eval "
    "python python3 node nodejs perl ruby php lua deno bun npm npx pip pip3 uv make git "
    "cat cd cut echo expr false grep head id ls nl paste pwd rev seq stat tail tr true uname "
    "uniq wc which whoami base64 find rg sed numfmt tac awk sort diff less more file du df "
    "touch cp mv rm mkdir rmdir ln chmod chown curl wget tee dd tar gzip unzip apply_patch "
    "applypatch . source command builtin exec eval trap alias"
).split()
_PROGRAM_NAME = re.compile(r"^[A-Za-z0-9._+-]+$")
# Features that bring tools outside the approval protocol (sub-agents, web, images, apps,
# plugins, memories, goals) or read state outside the session (shell snapshots).
_FEATURES_OFF = (
    "goals",
    "apps",
    "plugins",
    "memories",
    "image_generation",
    "browser_use",
    "computer_use",
    "tool_suggest",
    "shell_snapshot",
    "hooks",
    "view_image",
    "skill_search",
)


@dataclass(frozen=True)
class CodexRequest:
    """One approval codex asks for: a command to run or a file change to apply."""

    kind: RequestKind
    id: str  # codex's item id (the model's call id)
    command: str | None
    argv: tuple[str, ...]
    cwd: str | None
    paths: tuple[str, ...]  # the files a change touches (absolute, not normalised); () for commands
    params: dict[str, Any]

    def as_dict(self) -> dict[str, Any]:
        """The request as a run's pending input records it."""
        return {
            "kind": self.kind,
            "id": self.id,
            "command": self.command,
            "cwd": self.cwd,
            "paths": list(self.paths),
        }


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


# --- configuration ------------------------------------------------------------------------


def _toml(value: str) -> str:
    return json.dumps(value)  # a JSON string is a TOML basic string


def session_config(*, model: str, base_url: str, sandbox: Sandbox) -> str:
    """The `config.toml` of one session: the engine's provider, sandbox and approval policy,
    and nothing that reaches outside the session."""
    lines = [
        f"model = {_toml(model)}",
        f"model_provider = {_toml(PROVIDER)}",
        'approval_policy = "on-request"',
        'approvals_reviewer = "user"',
        f"sandbox_mode = {_toml(sandbox)}",
        'web_search = "disabled"',
        "check_for_update_on_startup = false",
        "project_doc_max_bytes = 0",
        "",
        "[sandbox_workspace_write]",
        "network_access = false",
        "exclude_tmpdir_env_var = true",
        "exclude_slash_tmp = true",
        "",
        "[features]",
        *(f"{name} = false" for name in _FEATURES_OFF),
        "",
        "[agents]",
        "enabled = false",
        "",
        "[shell_environment_policy]",
        'inherit = "core"',
        "",
        "[history]",
        'persistence = "none"',
        "",
        "[analytics]",
        "enabled = false",
        "",
        f"[model_providers.{PROVIDER}]",
        'name = "ADE"',
        f"base_url = {_toml(base_url)}",
        f"env_key = {_toml(KEY_VARIABLE)}",
        'wire_api = "responses"',
        "request_max_retries = 0",
        "stream_max_retries = 0",
        "",
    ]
    return "\n".join(lines)


def program_names(path: str, worktree: Path) -> list[str]:
    """Every program name a command could start: `BASE_PROGRAMS`, the executables on `path`
    and those in the worktree (names that cannot be written in a rule are left out)."""
    names = set(BASE_PROGRAMS)
    directories = [Path(entry) for entry in path.split(os.pathsep) if entry]
    for directory in directories:
        with contextlib.suppress(OSError):
            for entry in os.scandir(directory):
                names.add(entry.name)
    for root, dirs, files in os.walk(worktree):
        dirs[:] = [d for d in dirs if d != ".git"]
        for name in files:
            if os.access(os.path.join(root, name), os.X_OK):
                names.add(name)
    return sorted(name for name in names if _PROGRAM_NAME.match(name))


def exec_rules(names: Iterable[str]) -> str:
    """An execpolicy rules file that makes codex ask before running any of `names` (matched
    by basename, so `/bin/cat` and `./cat` are `cat`)."""
    alternatives = ", ".join(_toml(name) for name in sorted(set(names)))
    return (
        "# Written by ADE Tasks for one session: every command asks the engine first.\n"
        f'prefix_rule(pattern=[[{alternatives}]], decision="prompt", '
        'justification="the engine decides every command")\n'
    )


def write_session_home(
    codex_home: Path, *, model: str, base_url: str, sandbox: Sandbox, path: str, worktree: Path
) -> Path:
    """Fill `codex_home` (config, rules, an empty HOME) for one session; the HOME it made."""
    home = codex_home / "home"
    (codex_home / "rules").mkdir(parents=True, exist_ok=True)
    home.mkdir(parents=True, exist_ok=True)
    (codex_home / "config.toml").write_text(
        session_config(model=model, base_url=base_url, sandbox=sandbox), encoding="utf-8"
    )
    (codex_home / "rules" / RULES_FILE).write_text(
        exec_rules(program_names(path, worktree)), encoding="utf-8"
    )
    return home


# --- the protocol -------------------------------------------------------------------------


def approval_request(
    method: str, params: dict[str, Any], items: Mapping[str, dict[str, Any]], worktree: Path
) -> CodexRequest | None:
    """The `CodexRequest` of a server request that asks for an approval, None for others."""
    item_id = str(params.get("itemId") or params.get("callId") or params.get("call_id") or "")
    if method in ("item/commandExecution/requestApproval", "execCommandApproval"):
        command = params.get("command")
        text: str | None
        if isinstance(command, list):
            argv = tuple(str(part) for part in command)
            text = shlex.join(argv)
        else:
            text = str(command) if command is not None else None
            argv = _split(text)
        cwd = params.get("cwd")
        return CodexRequest(
            "command", item_id, text, argv, str(cwd) if cwd else None, (), dict(params)
        )
    if method in ("item/fileChange/requestApproval", "applyPatchApproval"):
        changes = params.get("fileChanges") or items.get(item_id, {}).get("changes") or []
        paths = tuple(_change_paths(changes, worktree))
        return CodexRequest("file_change", item_id, None, (), None, paths, dict(params))
    return None


def _split(text: str | None) -> tuple[str, ...]:
    if not text:
        return ()
    try:
        return tuple(shlex.split(text))
    except ValueError:
        return ()


def _change_paths(changes: Any, worktree: Path) -> Iterable[str]:
    entries: Iterable[tuple[str, Any]]
    if isinstance(changes, dict):  # v1: {path: change}
        entries = changes.items()
    elif isinstance(changes, list):
        entries = ((str(c.get("path", "")), c) for c in changes if isinstance(c, dict))
    else:
        return
    for path, change in entries:
        if path:
            yield os.path.join(worktree, path)
        kind = change.get("kind") if isinstance(change, dict) else None
        moved = kind.get("move_path") if isinstance(kind, dict) else None
        if moved:
            yield os.path.join(worktree, str(moved))


def item_events(item: dict[str, Any], *, done: bool) -> list[tuple[str, dict[str, Any]]]:
    """The neutral run events of one `item/started` (done=False) or `item/completed` item."""
    kind, item_id = item.get("type"), str(item.get("id"))
    if kind == "agentMessage":
        return [("agent.message", {"text": item.get("text", "")})] if done else []
    if kind == "reasoning":
        parts = [*item.get("summary", []), *item.get("content", [])]
        text = "\n".join(str(p) for p in parts if p)
        return [("agent.reasoning", {"text": text})] if done and text else []
    if kind in ("userMessage", "hookPrompt"):
        return []
    if kind == "commandExecution":
        if not done:
            call = {"command": item.get("command"), "cwd": item.get("cwd")}
            return [
                ("agent.tool_call", {"id": item_id, "name": "command_execution", "input": call})
            ]
        status = item.get("status")
        result = {
            "id": item_id,
            "output": item.get("aggregatedOutput") or "",
            "exit_code": item.get("exitCode"),
            "is_error": status != "completed" or item.get("exitCode") not in (0, None),
        }
        return [("agent.tool_result", result)]
    if kind == "fileChange":
        if not done:
            changes = [
                {"path": c.get("path"), "kind": (c.get("kind") or {}).get("type")}
                for c in item.get("changes", [])
                if isinstance(c, dict)
            ]
            return [
                (
                    "agent.tool_call",
                    {"id": item_id, "name": "file_change", "input": {"changes": changes}},
                )
            ]
        status = item.get("status")
        result = {
            "id": item_id,
            "output": status,
            "exit_code": None,
            "is_error": status != "completed",
        }
        return [("agent.tool_result", result)]
    # Anything else codex may run (MCP or dynamic tool calls, web searches, ...): recorded, so
    # a tool the engine did not expect is never silent.
    if not done:
        return [("agent.tool_call", {"id": item_id, "name": str(kind), "input": item})]
    return [
        ("agent.tool_result", {"id": item_id, "output": item, "exit_code": None, "is_error": False})
    ]


# --- the session --------------------------------------------------------------------------


class _Ended(Exception):
    """Ends the conversation with a status (control flow inside the session, never escapes)."""

    def __init__(self, status: CodexStatus, error: str | None) -> None:
        super().__init__(error)
        self.status, self.error = status, error


class _Session:
    """The client side of one app-server connection."""

    def __init__(
        self,
        process: ContainedProcess,
        *,
        worktree: Path,
        decide: Callable[[CodexRequest], Decision],
        record: Callable[[str, dict[str, Any]], None],
        over_budget: Callable[[int, int], str | None],
    ) -> None:
        assert process.stdin is not None
        self.process = process
        self.stdin: IO[bytes] = process.stdin
        self.worktree = worktree
        self.decide, self.record, self.over_budget = decide, record, over_budget
        self.outcome = CodexOutcome("failed")
        self.inbox: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.stderr: deque[str] = deque(maxlen=STDERR_LINES)
        self.items: dict[str, dict[str, Any]] = {}
        self.next_id = 0
        self.waiting: dict[int, str] = {}
        self.turn_done = False
        self.readers = [
            threading.Thread(target=self._read_stdout, daemon=True),
            threading.Thread(target=self._read_stderr, daemon=True),
        ]
        for reader in self.readers:
            reader.start()

    def _read_stdout(self) -> None:
        for raw in self.process.output:
            line = raw.decode("utf-8", "replace").strip()
            if not line.startswith("{"):
                if line:
                    self.stderr.append(line[:500])
                continue
            try:
                self.inbox.put(json.loads(line))
            except ValueError:
                self.stderr.append(f"unparsable: {line[:480]}")
        self.inbox.put(None)

    def _read_stderr(self) -> None:
        assert self.process.stderr is not None
        for raw in self.process.stderr:
            line = raw.decode("utf-8", "replace").rstrip()
            if line:
                self.stderr.append(line[:500])

    def send(self, message: dict[str, Any]) -> None:
        try:
            self.stdin.write(json.dumps(message).encode() + b"\n")
            self.stdin.flush()
        except OSError as exc:  # codex is gone; its EOF on stdout says so next
            self.stderr.append(f"write to codex failed: {exc}")

    def call(self, method: str, params: dict[str, Any]) -> None:
        self.next_id += 1
        self.waiting[self.next_id] = method
        self.send({"id": self.next_id, "method": method, "params": params})

    def handle(self, message: dict[str, Any], on_result: Callable[[str, Any], None]) -> None:
        method = message.get("method")
        if method is None:  # a response to one of our calls
            called = self.waiting.pop(int(message.get("id", -1)), "?")
            if "error" in message:
                error = message["error"]
                text = error.get("message") if isinstance(error, dict) else error
                raise _Ended("failed", f"codex refused {called}: {text}")
            on_result(called, message.get("result"))
        elif "id" in message:
            self.answer(message["id"], str(method), message.get("params") or {})
        else:
            self.notice(str(method), message.get("params") or {})

    def answer(self, request_id: Any, method: str, params: dict[str, Any]) -> None:
        """Answer a request codex sent: an approval by the engine's decision, others refused."""
        request = approval_request(method, params, self.items, self.worktree)
        if request is None:
            self.record("agent.tool_decision", {
                "id": str(params.get("itemId", "")), "tool": method, "verdict": "deny",
                "reason": f"ADE does not answer codex's {method}",
            })  # fmt: skip
            self.send({
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
        verdict = "accept" if decision.verdict == "allow" else "decline"
        if method in ("execCommandApproval", "applyPatchApproval"):  # v1 wording
            verdict = "approved" if verdict == "accept" else "denied"
        self.send({"id": request_id, "result": {"decision": verdict}})

    def notice(self, method: str, params: dict[str, Any]) -> None:
        if method in ("item/started", "item/completed"):
            item = params.get("item")
            if isinstance(item, dict):
                self.items[str(item.get("id"))] = item
                done = method == "item/completed"
                for kind, data in item_events(item, done=done):
                    self.record(kind, data)
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
    record: Callable[[str, dict[str, Any]], None],
    should_stop: Callable[[], bool],
    deadline: float,
    over_budget: Callable[[int, int], str | None],
    kill_grace: float,
    user: AgentUser | None = None,
) -> CodexOutcome:
    """Run one codex turn on `prompt` in `worktree`, contained, until it completes, fails, is
    stopped, passes `deadline` (time.monotonic) or goes over budget. As `user`, if given: it
    owns CODEX_HOME and HOME (codex writes its sessions and logs there); the config and rules
    files in it are the worker's, but the user could replace them, so it is the sandbox that
    keeps the session's own commands away from them (CODEX_HOME is no writable root)."""
    path = env.get("PATH", os.defpath)
    home = write_session_home(
        codex_home, model=model, base_url=base_url, sandbox=sandbox, path=path, worktree=worktree
    )
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
    try:
        process = ContainedProcess(
            argv, cwd=str(worktree), env=child_env, kill_grace=kill_grace, stdin=True,
            separate_stderr=True, user=user.ids if user else None,
        )  # fmt: skip
    except OSError as exc:
        return CodexOutcome("failed", error=f"codex could not be started (`{binary}`): {exc}")
    with process:
        session = _Session(
            process, worktree=worktree, decide=decide, record=record, over_budget=over_budget
        )
        status, error = _converse(session, worktree, model, sandbox, prompt, should_stop, deadline)
        outcome = session.outcome
        outcome.status, outcome.error = status, error
        _end(session, graceful=status == "completed", kill_grace=kill_grace)
        try:
            outcome.exit_code = process.finish()
        except OSError as exc:
            outcome.exit_code = None
            if outcome.error is None and status == "completed":
                outcome.error = f"codex's container did not report: {exc}"
        for reader in session.readers:
            reader.join(timeout=kill_grace + 5)
        outcome.stderr = list(session.stderr)
        if status == "failed" and session.stderr and error and "exited" in error:
            outcome.error = f"{error}; last output: {session.stderr[-1]}"
    return outcome


def _converse(
    session: _Session,
    worktree: Path,
    model: str,
    sandbox: Sandbox,
    prompt: str,
    should_stop: Callable[[], bool],
    deadline: float,
) -> tuple[CodexStatus, str | None]:
    """Handshake, one turn, and every message until the turn ends: (status, error)."""

    def on_result(method: str, result: Any) -> None:
        if method == "initialize":
            session.send({"method": "initialized"})
            session.call("thread/start", {
                "cwd": str(worktree), "model": model, "modelProvider": PROVIDER,
                "approvalPolicy": "on-request", "approvalsReviewer": "user", "sandbox": sandbox,
                "ephemeral": True,
            })  # fmt: skip
        elif method == "thread/start":
            thread_id = str(((result or {}).get("thread") or {}).get("id"))
            session.outcome.thread_id = thread_id
            session.call("turn/start", {
                "threadId": thread_id, "input": [{"type": "text", "text": prompt}],
            })  # fmt: skip

    session.call("initialize", {
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
                message = session.inbox.get(timeout=min(left, 0.05))
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
    with contextlib.suppress(OSError):
        session.stdin.close()
    if not (graceful and session.process.wait(kill_grace)):
        session.process.stop()
