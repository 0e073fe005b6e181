"""The pure parts of the CLI agent providers (Claude Code, Codex): command lines, what a policy
becomes on each CLI, stream parsers, and the `ade-tasks providers` report.

Nothing here starts an agent session; the caller runs the argv (with `run_process`) and feeds the
output lines to a parser. Formats follow the recordings in `tests/fixtures/agents/`.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal, Protocol

from ade_tasks.rules.models import ToolPolicy
from ade_workers.process import run_process

PermissionMode = Literal["plan", "edit", "full-auto"]
SystemMode = Literal["append", "replace"]
CliName = Literal["claude-code", "codex"]

# The names `claude --help` gives the modes (choices of --permission-mode).
CLAUDE_PERMISSION_MODES: dict[str, str] = {
    "plan": "plan",
    "edit": "acceptEdits",
    "full-auto": "bypassPermissions",
}
# `codex exec --sandbox`; danger-full-access is deliberately never used.
CODEX_SANDBOXES: dict[str, str] = {
    "plan": "read-only",
    "edit": "workspace-write",
    "full-auto": "workspace-write",
}
VERSION_TIMEOUT = 5.0


# --- command lines ------------------------------------------------------------------------


def claude_code_argv(
    prompt: str,
    *,
    model: str,
    max_turns: int,
    permission_mode: PermissionMode,
    allowed_tools: Sequence[str] = (),
    denied_tools: Sequence[str] = (),
    system: str | None = None,
    system_mode: SystemMode = "append",
    binary: str = "claude",
) -> list[str]:
    """The `claude -p` command line for one headless session streaming JSONL."""
    argv = [
        binary,
        "-p",
        "--output-format",
        "stream-json",
        "--verbose",
        "--model",
        model,
        "--max-turns",
        str(max_turns),
        "--permission-mode",
        CLAUDE_PERMISSION_MODES[permission_mode],
    ]
    if system is not None:
        argv += [
            "--system-prompt" if system_mode == "replace" else "--append-system-prompt",
            system,
        ]
    if allowed_tools:
        argv += ["--allowedTools", *allowed_tools]
    if denied_tools:
        argv += ["--disallowedTools", *denied_tools]
    # `--` ends the variadic tool lists and keeps a prompt starting with "-" from being a flag.
    return [*argv, "--", prompt]


def codex_argv(
    prompt: str, *, model: str, permission_mode: PermissionMode, binary: str = "codex"
) -> list[str]:
    """The `codex exec --json` command line for one headless session streaming JSONL."""
    return [
        binary,
        "exec",
        "--json",
        "--sandbox",
        CODEX_SANDBOXES[permission_mode],
        "--model",
        model,
        "--",
        prompt,
    ]


# --- capability report --------------------------------------------------------------------


class Support(StrEnum):
    """How far a CLI honours one aspect of the requested policy."""

    ENFORCED = "enforced"
    BEST_EFFORT = "best-effort"
    UNSUPPORTED = "unsupported"


@dataclass(frozen=True)
class Capability:
    """One aspect of the policy, how the CLI honours it, and why."""

    aspect: str
    support: Support
    reason: str


@dataclass(frozen=True)
class CapabilityReport:
    """Every aspect of a ToolPolicy + permission mode mapped onto one CLI; nothing left out."""

    cli: CliName
    items: tuple[Capability, ...]

    def get(self, aspect: str) -> Capability:
        """The entry for `aspect` (KeyError if the report has none)."""
        for item in self.items:
            if item.aspect == aspect:
                return item
        raise KeyError(aspect)

    @property
    def downgrades(self) -> tuple[Capability, ...]:
        """The aspects the CLI does not fully enforce."""
        return tuple(item for item in self.items if item.support is not Support.ENFORCED)

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready form for run events and `--json` output."""
        return {
            "cli": self.cli,
            "items": [
                {"aspect": i.aspect, "support": i.support.value, "reason": i.reason}
                for i in self.items
            ],
        }


def capability_report(
    cli: CliName,
    policy: ToolPolicy,
    permission_mode: PermissionMode,
    *,
    system: str | None = None,
) -> CapabilityReport:
    """What `policy` and `permission_mode` become on `cli`, aspect by aspect."""
    build = _claude_capabilities if cli == "claude-code" else _codex_capabilities
    return CapabilityReport(cli=cli, items=tuple(build(policy, permission_mode, system)))


def _item(aspect: str, support: Support, reason: str) -> Capability:
    return Capability(aspect, support, reason)


def _fallback_ask() -> Capability:
    return _item(
        "fallback",
        Support.UNSUPPORTED,
        "fallback 'ask' needs a human, and a headless CLI cannot ask one: "
        "unlisted tools are refused instead",
    )


def _claude_capabilities(
    policy: ToolPolicy, mode: PermissionMode, system: str | None
) -> list[Capability]:
    E, B, U = Support.ENFORCED, Support.BEST_EFFORT, Support.UNSUPPORTED
    bypass = mode == "full-auto"
    items = [
        _item("permission_mode", E, f"--permission-mode {CLAUDE_PERMISSION_MODES[mode]}"),
        _item("max_turns", E, "--max-turns"),
        _item("system_prompt", E, "--system-prompt / --append-system-prompt")
        if system is not None
        else _item("system_prompt", E, "none requested"),
    ]
    if not policy.allowed_tools:
        items.append(_item("allowed_tools", E, "none requested"))
    elif bypass:
        items.append(
            _item(
                "allowed_tools",
                B,
                "--allowedTools only pre-approves; bypassPermissions also runs unlisted tools",
            )
        )
    else:
        items.append(_item("allowed_tools", E, "--allowedTools"))
    items.append(
        _item("denied_tools", E, "--disallowedTools")
        if policy.denied_tools
        else _item("denied_tools", E, "none requested")
    )
    if policy.fallback == "ask":
        items.append(_fallback_ask())
    elif policy.fallback == "allow":
        items.append(
            _item("fallback", E, "bypassPermissions runs every tool not disallowed")
            if bypass
            else _item("fallback", B, "headless -p refuses unlisted tools that need permission")
        )
    else:
        items.append(
            _item("fallback", U, "bypassPermissions runs unlisted tools; list them as denied")
            if bypass
            else _item(
                "fallback",
                B,
                "headless -p refuses unlisted tools that need permission; "
                "read-only tools (Read, Grep, Glob) still run",
            )
        )
    items.append(
        _item(
            "sandbox_root",
            B,
            "the session runs in the sandbox as cwd; tools can still reach absolute paths",
        )
    )
    return items


def _codex_capabilities(
    policy: ToolPolicy, mode: PermissionMode, system: str | None
) -> list[Capability]:
    E, B, U = Support.ENFORCED, Support.BEST_EFFORT, Support.UNSUPPORTED
    sandbox = CODEX_SANDBOXES[mode]
    items = [
        _item("permission_mode", E, f"--sandbox {sandbox}")
        if mode != "full-auto"
        else _item(
            "permission_mode",
            B,
            "full-auto runs as --sandbox workspace-write: no writes outside cwd, "
            "danger-full-access is never used",
        ),
        _item("max_turns", U, "codex exec has no turn limit; only the run timeout bounds it"),
        _item("system_prompt", U, "codex exec has no system prompt flag")
        if system is not None
        else _item("system_prompt", E, "none requested"),
        _item("allowed_tools", U, "codex exec has no per-tool allowlist; only the sandbox limits")
        if policy.allowed_tools
        else _item("allowed_tools", E, "none requested"),
    ]
    if not policy.denied_tools:
        items.append(_item("denied_tools", E, "none requested"))
    elif mode == "plan":
        items.append(
            _item(
                "denied_tools",
                B,
                "no per-tool deny flag; the read-only sandbox blocks writing tools only",
            )
        )
    else:
        items.append(_item("denied_tools", U, "codex exec has no per-tool deny flag"))
    if policy.fallback == "ask":
        items.append(_fallback_ask())
    else:
        items.append(
            _item(
                "fallback",
                U,
                f"codex exec runs every tool the {sandbox} sandbox permits; "
                f"fallback '{policy.fallback}' cannot be applied per tool",
            )
        )
    items.append(
        _item("sandbox_root", E, "read-only sandbox: no writes anywhere")
        if mode == "plan"
        else _item("sandbox_root", B, "workspace-write confines writes to cwd; reads are not")
    )
    return items


# --- stream parsers -----------------------------------------------------------------------


@dataclass(frozen=True)
class Usage:
    """Token counts as the CLI reports them (claude's input excludes cache reads; codex's
    includes its cached tokens)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0


@dataclass
class CliTranscript:
    """One CLI session's stream turned into neutral run events and a summary."""

    events: list[dict[str, Any]] = field(default_factory=list)
    final_text: str | None = None
    usage: Usage = field(default_factory=Usage)
    cost_usd: float | None = None
    permission_denials: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    session_id: str | None = None
    completed: bool = False
    init: dict[str, Any] | None = None  # the CLI's own account of the session (claude's init)

    @property
    def ok(self) -> bool:
        """Did the session finish without an error?"""
        return self.completed and not self.errors

    def emit(self, kind: str, **data: Any) -> None:
        """Append one neutral event."""
        self.events.append({"kind": kind, "data": data})

    def error(self, message: str, **data: Any) -> None:
        """Record an error and emit it as an `agent.error` event."""
        self.errors.append(message)
        self.emit("agent.error", message=message, **data)


def _objects(lines: Iterable[str], transcript: CliTranscript) -> Iterable[dict[str, Any]]:
    """The JSON objects of a JSONL stream; a malformed line becomes an error naming it."""
    for number, line in enumerate(lines, start=1):
        text = line.strip()
        if not text:
            continue
        try:
            obj = json.loads(text)
        except ValueError:
            obj = None
        if not isinstance(obj, dict):
            transcript.error(f"line {number}: not a JSON object: {text[:200]}", line=number)
            continue
        yield obj


def _int(value: Any) -> int:
    return value if isinstance(value, int) else 0


def parse_claude_stream(lines: Iterable[str]) -> CliTranscript:
    """Parse `claude -p --output-format stream-json --verbose` output."""
    transcript = CliTranscript()
    for obj in _objects(lines, transcript):
        kind = obj.get("type")
        if kind == "system":
            transcript.session_id = obj.get("session_id", transcript.session_id)
            if obj.get("subtype") == "init":
                transcript.init = obj
        elif kind == "assistant":
            _claude_blocks(transcript, obj, assistant=True)
        elif kind == "user":
            _claude_blocks(transcript, obj, assistant=False)
        elif kind == "result":
            _claude_result(transcript, obj)
        else:
            transcript.emit("agent.unknown", type=kind, event=obj)
    if not transcript.completed:
        transcript.error("the stream ended without a result event")
    return transcript


def _claude_blocks(transcript: CliTranscript, obj: dict[str, Any], *, assistant: bool) -> None:
    message = obj.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str):  # a plain user prompt echoed back
        return
    for block in content if isinstance(content, list) else []:
        btype = block.get("type") if isinstance(block, dict) else None
        if assistant and btype == "text":
            transcript.emit("agent.message", text=block.get("text", ""))
        elif assistant and btype == "thinking":
            transcript.emit("agent.reasoning", text=block.get("thinking", ""))
        elif assistant and btype == "tool_use":
            transcript.emit(
                "agent.tool_call",
                id=block.get("id"),
                name=block.get("name"),
                input=block.get("input", {}),
            )
        elif not assistant and btype == "tool_result":
            transcript.emit(
                "agent.tool_result",
                id=block.get("tool_use_id"),
                output=_tool_result_text(block.get("content")),
                is_error=bool(block.get("is_error", False)),
            )
        elif not assistant and btype == "text":
            continue  # the prompt or a replayed user message, not agent output
        else:
            transcript.emit("agent.unknown", type=f"{obj.get('type')}/{btype}", event=block)


def _tool_result_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return "" if content is None else json.dumps(content)


def _claude_result(transcript: CliTranscript, obj: dict[str, Any]) -> None:
    transcript.completed = True
    transcript.session_id = obj.get("session_id", transcript.session_id)
    result = obj.get("result")
    transcript.final_text = result if isinstance(result, str) else transcript.final_text
    usage = obj.get("usage")
    if isinstance(usage, dict):
        transcript.usage = Usage(
            input_tokens=_int(usage.get("input_tokens")),
            output_tokens=_int(usage.get("output_tokens")),
            cached_input_tokens=_int(usage.get("cache_read_input_tokens")),
        )
    cost = obj.get("total_cost_usd")
    transcript.cost_usd = float(cost) if isinstance(cost, int | float) else None
    denials = obj.get("permission_denials")
    if isinstance(denials, list):
        transcript.permission_denials = [d for d in denials if isinstance(d, dict)]
    subtype = str(obj.get("subtype", ""))
    if obj.get("is_error") or subtype.startswith("error"):
        transcript.error(f"claude ended with {subtype or 'an error'}", subtype=subtype)


def parse_codex_stream(lines: Iterable[str]) -> CliTranscript:
    """Parse `codex exec --json` output."""
    transcript = CliTranscript()
    called: set[str] = set()
    for obj in _objects(lines, transcript):
        kind = obj.get("type")
        if kind == "thread.started":
            transcript.session_id = obj.get("thread_id")
        elif kind == "turn.started":
            continue
        elif kind in ("item.started", "item.updated", "item.completed"):
            item = obj.get("item")
            if isinstance(item, dict):
                _codex_item(transcript, item, called, done=kind == "item.completed")
            else:
                transcript.emit("agent.unknown", type=kind, event=obj)
        elif kind == "turn.completed":
            transcript.completed = True
            usage = obj.get("usage")
            if isinstance(usage, dict):
                transcript.usage = Usage(
                    input_tokens=_int(usage.get("input_tokens")),
                    output_tokens=_int(usage.get("output_tokens")),
                    cached_input_tokens=_int(usage.get("cached_input_tokens")),
                )
        elif kind in ("turn.failed", "error"):
            transcript.completed = kind == "turn.failed" or transcript.completed
            transcript.error(f"codex {kind}: {_codex_error_message(obj)}", type=kind)
        else:
            transcript.emit("agent.unknown", type=kind, event=obj)
    if not transcript.completed:
        transcript.error("the stream ended without turn.completed (truncated)")
    return transcript


def _codex_item(
    transcript: CliTranscript, item: dict[str, Any], called: set[str], *, done: bool
) -> None:
    itype, item_id = item.get("type"), str(item.get("id"))
    if itype == "agent_message":
        if done:
            transcript.final_text = str(item.get("text", ""))
            transcript.emit("agent.message", text=transcript.final_text)
    elif itype == "reasoning":
        if done:
            transcript.emit("agent.reasoning", text=item.get("text", ""))
    elif itype in ("command_execution", "file_change"):
        args = (
            {"command": item.get("command")}
            if itype == "command_execution"
            else {"changes": item.get("changes", [])}
        )
        if item_id not in called:
            called.add(item_id)
            transcript.emit("agent.tool_call", id=item_id, name=itype, input=args)
        if done:
            transcript.emit(
                "agent.tool_result",
                id=item_id,
                output=item.get("aggregated_output", ""),
                exit_code=item.get("exit_code"),
                status=item.get("status"),
                is_error=item.get("status") == "failed",
            )
    elif done:
        transcript.emit("agent.unknown", type=f"item/{itype}", event=item)


def _codex_error_message(obj: dict[str, Any]) -> str:
    error = obj.get("error")
    if isinstance(error, dict) and "message" in error:
        return str(error["message"])
    if "message" in obj:
        return str(obj["message"])
    return json.dumps(obj)


# --- providers report ---------------------------------------------------------------------


class Which(Protocol):
    """`shutil.which`'s shape."""

    def __call__(self, cmd: str, mode: int = ..., path: str | None = ...) -> str | None: ...


@dataclass(frozen=True)
class ProviderStatus:
    """Is one provider usable from this machine, and if not, how to fix it. Never a secret."""

    name: str
    ready: bool
    credentials: str | None  # where they were found (a variable or file name), never a value
    base_url: str | None = None
    binary: str | None = None
    version: str | None = None
    fixes: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready form."""
        return {
            "name": self.name,
            "ready": self.ready,
            "credentials": self.credentials,
            "base_url": self.base_url,
            "binary": self.binary,
            "version": self.version,
            "fixes": list(self.fixes),
        }


@dataclass(frozen=True)
class _Api:
    name: str
    key_vars: tuple[str, ...]
    url_vars: tuple[str, ...]
    default_url: str


@dataclass(frozen=True)
class _Cli:
    name: str
    binary: str
    prefix: str  # of its settings: <prefix>API_KEY, <prefix>BASE_URL, <prefix>BINARY
    default_url: str
    install: str


_APIS = (
    _Api(
        "openai",
        ("ADE_PROVIDERS__OPENAI__API_KEY", "OPENAI_API_KEY"),
        ("ADE_PROVIDERS__OPENAI__BASE_URL", "OPENAI_BASE_URL"),
        "https://api.openai.com/v1",
    ),
    _Api(
        "anthropic",
        ("ADE_PROVIDERS__ANTHROPIC__API_KEY", "ANTHROPIC_API_KEY"),
        ("ADE_PROVIDERS__ANTHROPIC__BASE_URL", "ANTHROPIC_BASE_URL"),
        "https://api.anthropic.com",
    ),
)
_CLIS = (
    _Cli(
        "claude-code",
        "claude",
        "ADE_PROVIDERS__CLAUDE_CODE__",
        "https://api.anthropic.com",
        "npm install -g @anthropic-ai/claude-code",
    ),
    _Cli(
        "codex",
        "codex",
        "ADE_PROVIDERS__CODEX__",
        "https://api.openai.com/v1",
        "npm install -g @openai/codex",
    ),
)


def run_version(binary: str) -> str | None:
    """The first line of `<binary> --version`, or None if it fails or takes over 5 s."""
    try:
        result = run_process(
            [binary, "--version"],
            cwd=Path.cwd(),
            env=os.environ,
            timeout=VERSION_TIMEOUT,
            kill_grace=0.5,
            cap=4096,
        )
    except OSError:
        return None
    if result.exit_code != 0:
        return None
    lines = result.output.strip().splitlines()
    return lines[0].strip() if lines else None


def _first_var(env: Mapping[str, str], names: Sequence[str]) -> str | None:
    return next((name for name in names if env.get(name)), None)


def providers_report(
    env: Mapping[str, str],
    which: Which = shutil.which,
    run_version: Callable[[str], str | None] = run_version,
    home: Path | None = None,
) -> list[ProviderStatus]:
    """Which providers are usable here: credentials (by name), base URLs, installed CLIs.

    Reads only `env` and the home directory; no network calls."""
    home = home or Path(env.get("HOME") or Path.home())
    report: list[ProviderStatus] = []
    for api in _APIS:
        key = _first_var(env, api.key_vars)
        url_var = _first_var(env, api.url_vars)
        report.append(
            ProviderStatus(
                name=api.name,
                ready=key is not None,
                credentials=key,
                base_url=env[url_var] if url_var else api.default_url,
                fixes=() if key else (f"export {api.key_vars[-1]}=... (or {api.key_vars[0]})",),
            )
        )
    for cli in _CLIS:
        # A CLI session runs with a private home and reaches the provider only through the
        # engine's model proxy, so the CLI's own login (~/.claude, ~/.codex) does not apply:
        # the engine's settings are its credentials.
        path = which(env.get(cli.prefix + "BINARY") or cli.binary, path=env.get("PATH"))
        version = run_version(path) if path else None
        key = cli.prefix + "API_KEY"
        credentials = key if env.get(key) else None
        fixes = ([] if path else [cli.install]) + (
            [] if credentials else [f"export {key}=... (it reaches only the engine's proxy)"]
        )
        report.append(
            ProviderStatus(
                name=cli.name,
                ready=path is not None and credentials is not None,
                credentials=credentials,
                base_url=env.get(cli.prefix + "BASE_URL") or cli.default_url,
                binary=path,
                version=version,
                fixes=tuple(fixes),
            )
        )
    return report
