"""The pure parts of the CLI agent providers (Claude Code, Codex): the capability report's
shape, Claude's stream-json parser, and the `ade-tasks providers` report.

Nothing here starts an agent session (`claude_session`, `codex_session` do). The stream format
follows the recordings in `tests/fixtures/agents/claude-code/`.
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

from ade_workers.containment.process import run_process

CliName = Literal["claude-code", "codex"]

VERSION_TIMEOUT = 5.0


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
    result_subtype: str | None = None  # how claude says it ended (success, error_max_turns, ...)

    @property
    def ok(self) -> bool:
        """Did the session finish without an error?"""
        return self.completed and not self.errors

    def emit(self, kind: str, **data: object) -> None:
        """Append one neutral event."""
        self.events.append({"kind": kind, "data": data})

    def error(self, message: str, **data: object) -> None:
        """Record an error and emit it as an `agent.error` event."""
        self.errors.append(message)
        self.emit("agent.error", message=message, **data)


def _objects(
    lines: Iterable[str], transcript: CliTranscript, first: int = 1
) -> Iterable[dict[str, Any]]:
    """The JSON objects of a JSONL stream (its lines numbered from `first`); a malformed line
    becomes an error naming it."""
    for number, line in enumerate(lines, start=first):
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


def _int(value: object) -> int:
    return value if isinstance(value, int) else 0


def parse_claude_stream(lines: Iterable[str]) -> CliTranscript:
    """Parse `claude -p --output-format stream-json --verbose` output."""
    stream = ClaudeStream()
    for line in lines:
        stream.feed(line)
    return stream.finish()


class ClaudeStream:
    """Claude's stream-json parsed line by line as it arrives: `feed` returns the events each
    line gave, so they can be recorded while the session runs; `finish` the transcript."""

    def __init__(self) -> None:
        self.transcript = CliTranscript()
        self._lines = 0

    def feed(self, line: str) -> list[dict[str, Any]]:
        transcript = self.transcript
        before = len(transcript.events)
        self._lines += 1
        for obj in _objects([line], transcript, first=self._lines):
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
        return transcript.events[before:]

    def finish(self) -> CliTranscript:
        if not self.transcript.completed:
            self.transcript.error("the stream ended without a result event")
        return self.transcript


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


def _tool_result_text(content: object) -> str:
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
    transcript.result_subtype = subtype or None
    if obj.get("is_error") or subtype.startswith("error"):
        transcript.error(f"claude ended with {subtype or 'an error'}", subtype=subtype)


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
class CliFacts:
    """What the engine knows of a CLI agent before running it: its provider name, its binary,
    the prefix of its settings (<prefix>API_KEY, <prefix>BASE_URL, <prefix>BINARY), the API it
    reaches by default, how to install it, and whether the system text must go in the prompt
    (no system prompt flag). Its driver (`ade_workers.agents.cli.cli_session.CLI_DRIVERS`) runs
    it."""

    name: CliName
    binary: str
    prefix: str
    default_url: str
    install: str
    system_in_prompt: bool = False


CLAUDE_CODE = CliFacts(
    "claude-code",
    "claude",
    "ADE_PROVIDERS__CLAUDE_CODE__",
    "https://api.anthropic.com",
    "npm install -g @anthropic-ai/claude-code",
)
CODEX = CliFacts(
    "codex",
    "codex",
    "ADE_PROVIDERS__CODEX__",
    "https://api.openai.com/v1",
    "npm install -g @openai/codex",
    system_in_prompt=True,
)


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
_CLIS = (CLAUDE_CODE, CODEX)


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
