"""The pure parts of the CLI agent providers (Claude Code, Codex): the capability report's
shape, Claude's stream-json parser, and what the engine knows of each CLI before running it
(`CliFacts`, by name in `CLI_FACTS`; `ade_workers.agents.readiness` reads them).

Nothing here starts an agent session (`claude_session`, `codex_session` do). The stream format
follows the recordings in `tests/fixtures/agents/claude-code/`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum

from ade_tasks.json_document import JsonObject
from ade_tasks.rules.providers import claude_code, codex
from ade_tasks.rules.providers.declaration import AgentProvider

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

    cli: str
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

    def as_dict(self) -> JsonObject:
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

    events: list[JsonObject] = field(default_factory=list)
    final_text: str | None = None
    usage: Usage = field(default_factory=Usage)
    cost_usd: float | None = None
    permission_denials: list[JsonObject] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    session_id: str | None = None
    completed: bool = False
    init: JsonObject | None = None  # the CLI's own account of the session (claude's init)
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
) -> Iterable[JsonObject]:
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

    def feed(self, line: str) -> list[JsonObject]:
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


def _claude_blocks(transcript: CliTranscript, obj: JsonObject, *, assistant: bool) -> None:
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


def _claude_result(transcript: CliTranscript, obj: JsonObject) -> None:
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


# --- what a CLI is ----------------------------------------------------------------------


@dataclass(frozen=True)
class CliFacts:
    """What the engine knows of a CLI agent before running it: its provider, its binary, the
    API it reaches by default, how to install it, the model a connection check asks, and
    whether the system text must go in the prompt (no system prompt flag). Its settings are
    <prefix>API_KEY, <prefix>BASE_URL and <prefix>BINARY. Its driver
    (`ade_workers.agents.cli.cli_session.CLI_DRIVERS`, by `register`) runs it."""

    provider: AgentProvider
    binary: str
    default_url: str
    install: str
    check_model: str
    system_in_prompt: bool = False

    @property
    def name(self) -> str:
        """The provider name rules use."""
        return self.provider.name

    @property
    def prefix(self) -> str:
        """The prefix of its settings (`ADE_PROVIDERS__CLAUDE_CODE__`)."""
        return self.provider.settings_prefix


CLAUDE_CODE = CliFacts(
    claude_code.PROVIDER,
    "claude",
    "https://api.anthropic.com",
    "npm install -g @anthropic-ai/claude-code",
    "claude-haiku-4-5",
)
CODEX = CliFacts(
    codex.PROVIDER,
    "codex",
    "https://api.openai.com/v1",
    "npm install -g @openai/codex",
    "gpt-5-mini",
    system_in_prompt=True,
)

#: The CLI agents by provider name, for what must not import their drivers (`readiness`);
#: `cli_session.register(DRIVER)` adds one.
CLI_FACTS: dict[str, CliFacts] = {facts.name: facts for facts in (CLAUDE_CODE, CODEX)}
