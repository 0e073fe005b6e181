"""One headless session of a CLI agent provider (`claude-code`, `codex`), bounded by the engine.

`run_cli_session` runs the session (`claude_session.run_claude`, `codex_session.run_codex`:
the engine decides every tool call, holds the key, meters the budget, contains the processes)
and turns what the CLI did into the same run events and `SessionOutcome` the HTTP tool loop
gives.

Choices, in order of what happens:

- The capability report (what the engine enforces on this CLI, aspect by aspect, and how) is
  recorded as `agent.capabilities` before the CLI starts; Claude's is recorded again once its
  init event told which tools and MCP servers it really had (`checked_against: init`).
- A redelivered or answered run starts a fresh CLI session: the CLI's transcript lived in the
  session's private config home. The repeated call meets the operator's answer (`call_id`).
- The prompt ends with an instruction to finish with a fenced ```json block
  `{"summary", "findings", "confidence"}`; `parse_report` reads it leniently from the final
  message (no block or a broken one: the whole final message is the summary, no findings;
  invalid findings are dropped and listed in an `agent.report_note` event).
- Codex has no system prompt: the `system` text is put before the prompt instead, under an
  "Instructions" heading.
- Claude's stdout and stderr arrive merged (`run_process`). Lines that do not start with `{` are
  treated as stderr noise: kept (capped) in an `agent.cli_output` event, and the last one names
  the cause in a failure message. A line that starts with `{` and is not valid JSON is a stream
  error (`agent.error`), so a corrupt stream fails the session. The stream is parsed once the
  process has ended; the engine's decisions are recorded live (`agent.tool_decision`). If the
  output exceeded `OUTPUT_CAP`, its middle is cut: the line cut in half is dropped and an
  `agent.output_truncated` event says so.
- Secrets (the engine's, the provider key, the session token) are masked before anything is
  parsed or recorded.

The return value is a `CliSessionOutcome`: the `SessionOutcome` plus the session's cost in USD
as the CLI reports it (claude does; codex does not) and the capability report.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ade_tasks.errors import AdeError
from ade_tasks.rules.models import AgentSession
from ade_workers.agents.claude_session import capabilities as claude_capabilities
from ade_workers.agents.claude_session import run_claude
from ade_workers.agents.cli_agents import _CLIS, CliName, CliTranscript, parse_claude_stream
from ade_workers.agents.cli_setup import CliSetup
from ade_workers.agents.codex_session import CodexRun, run_codex, unenforceable
from ade_workers.agents.codex_session import capabilities as codex_capabilities
from ade_workers.agents.session import Record, SessionOutcome, SessionStatus
from ade_workers.agents.tools import FINDING_SEVERITIES
from ade_workers.process import ProcessResult

#: CLI agents and the executable each is found as when settings name none.
CLI_BINARIES = {"claude-code": "claude", "codex": "codex"}
OUTPUT_CAP = 16_000_000
"""Characters of CLI output kept (head + tail); a session's whole stream normally fits."""
NOISE_LINES = 50
NOISE_LINE_CHARS = 500
_TRUNCATION = re.compile(r"^\[\.\.\. \d+ characters omitted \.\.\.\]$")
_JSON_BLOCK = re.compile(r"```json[ \t]*\r?\n(.*?)\r?\n?```", re.DOTALL | re.IGNORECASE)
_ASSISTANT_KINDS = frozenset({"agent.message", "agent.reasoning", "agent.tool_call"})

REPORT_INSTRUCTION = """\
When you are done, end your final message with a fenced ```json block (and nothing after it):
{"summary": "<what you did or found>", "findings": [{"severity": "error|warning|info", \
"path": "<file relative to the working directory>", "line": <number>, "message": "<finding>"}], \
"confidence": <0.0-1.0>}
Use an empty findings list when there is nothing to report."""


@dataclass(frozen=True)
class CliSessionOutcome:
    """How a CLI session ended (`outcome`), what it cost in USD if the CLI says, and the
    capability report recorded before it started."""

    outcome: SessionOutcome
    cost_usd: float | None
    capabilities: dict[str, Any]


@dataclass(frozen=True)
class Report:
    """The structured end of a session's final message."""

    summary: str
    findings: list[dict[str, Any]]
    confidence: float | None
    notes: list[str] = field(default_factory=list)  # what was dropped or missing, for people


def parse_report(final_text: str | None) -> Report:
    """The last fenced ```json report block of `final_text`, leniently.

    No block or an unparsable one: the whole text is the summary and there are no findings.
    A finding without a known severity or a message is dropped; a bad path or line is left out.
    """
    text = (final_text or "").strip()
    blocks = _JSON_BLOCK.findall(text)
    if not blocks:
        return Report(text, [], None, ["no ```json report block in the final message"])
    try:
        data = json.loads(blocks[-1])
    except ValueError as exc:
        return Report(text, [], None, [f"the report block is not valid JSON: {exc}"])
    if not isinstance(data, dict):
        return Report(text, [], None, ["the report block is not a JSON object"])
    notes: list[str] = []
    summary = data.get("summary")
    if not isinstance(summary, str) or not summary.strip():
        notes.append("the report block has no summary; the message text is used")
        summary = _JSON_BLOCK.sub("", text).strip() or text
    raw_findings = data.get("findings", [])
    if not isinstance(raw_findings, list):
        notes.append("findings is not a list; ignored")
        raw_findings = []
    findings: list[dict[str, Any]] = []
    for index, raw in enumerate(raw_findings):
        finding = _finding(raw, f"findings[{index}]", notes)
        if finding is not None:
            findings.append(finding)
    confidence = data.get("confidence")
    if confidence is not None and (
        not isinstance(confidence, int | float)
        or isinstance(confidence, bool)
        or not 0 <= confidence <= 1
    ):
        notes.append(f"confidence {confidence!r} is not a number from 0 to 1; ignored")
        confidence = None
    return Report(
        summary.strip(),
        findings,
        float(confidence) if confidence is not None else None,
        notes,
    )


def _finding(raw: Any, where: str, notes: list[str]) -> dict[str, Any] | None:
    if not isinstance(raw, dict):
        notes.append(f"{where} is not an object; dropped")
        return None
    severity = raw.get("severity")
    if isinstance(severity, str):
        severity = severity.lower()
    if severity not in FINDING_SEVERITIES:
        notes.append(f"{where}.severity {severity!r} is not one of {FINDING_SEVERITIES}; dropped")
        return None
    message = raw.get("message")
    if not isinstance(message, str) or not message.strip():
        notes.append(f"{where} has no message; dropped")
        return None
    finding: dict[str, Any] = {"severity": severity, "message": message.strip()}
    path, line = raw.get("path"), raw.get("line")
    if isinstance(path, str) and path.strip():
        finding["path"] = path.strip()
    elif path is not None:
        notes.append(f"{where}.path {path!r} is not a path; left out")
    if isinstance(line, int) and not isinstance(line, bool) and line >= 1:
        finding["line"] = line
    elif line is not None:
        notes.append(f"{where}.line {line!r} is not a line number; left out")
    return finding


def session_prompt(cli: CliName, prompt: str, system: str | None) -> str:
    """The prompt the CLI gets: the rule's prompt, the report instruction, and (codex only,
    which has no system prompt flag) the system text in front."""
    text = f"{prompt.rstrip()}\n\n{REPORT_INSTRUCTION}"
    if cli == "codex" and system:
        text = f"Instructions:\n{system.strip()}\n\nTask:\n{text}"
    return text


def run_cli_session(
    execution: AgentSession,
    setup: CliSetup,
    *,
    prompt: str,
    system: str | None,
    deadline: float,
    should_stop: Callable[[], bool],
    kill_grace: float,
) -> CliSessionOutcome:
    """Run one headless session of the CLI `execution.provider` names, bounded by the engine
    (`claude_session`, `codex_session`)."""
    cli = _cli_name(execution)
    record = setup.record
    if cli == "codex":
        report = codex_capabilities(setup, execution)
    else:
        report = claude_capabilities(setup, execution, None)
    capabilities = report.as_dict()
    record("agent.capabilities", capabilities)

    def ended(status: SessionStatus, error: str) -> CliSessionOutcome:
        outcome = SessionOutcome(status, "", [], None, 0, 0, 0, error, None)
        return CliSessionOutcome(outcome, None, capabilities)

    if deadline - time.monotonic() <= 0:
        return ended("timed_out", f"the session's deadline passed before {cli} started")
    if should_stop():
        return ended("failed", f"{cli} was cancelled before it started")
    text = session_prompt(cli, prompt, system)
    try:
        if cli == "codex":
            refused = unenforceable(setup, execution)
            if refused is not None:
                return ended("failed", refused)
            codex = run_codex(
                execution,
                setup,
                prompt=text,
                deadline=deadline,
                should_stop=should_stop,
                kill_grace=kill_grace,
            )
            return _codex_outcome(codex, capabilities, record)
        claude = run_claude(
            execution,
            setup,
            prompt=text,
            system=system,
            deadline=deadline,
            should_stop=should_stop,
            kill_grace=kill_grace,
            output_cap=OUTPUT_CAP,
        )
    except FileNotFoundError:
        return ended("failed", _not_installed(cli, setup.binary))
    except AdeError as exc:  # the agent user cannot reach what the session needs
        return ended("failed", exc.message)
    except OSError as exc:
        return ended("failed", f"{cli} could not be started (`{setup.binary}`): {exc}")

    result, stop = claude.result, claude.stop
    lines, noise, truncated = _split_output(result.output)
    transcript = parse_claude_stream(lines)
    if truncated:
        record("agent.output_truncated", {"reason": f"over {OUTPUT_CAP} characters of output"})
    for event in transcript.events:
        record(event["kind"], event["data"])
    if noise:
        record("agent.cli_output", {"lines": noise[-NOISE_LINES:], "total": len(noise)})
    record("agent.cli_result", _result_data(result, transcript))
    capabilities = claude_capabilities(setup, execution, transcript.init).as_dict()
    record("agent.capabilities", {**capabilities, "checked_against": "init"})

    status, error = _status(cli, result, transcript, noise)
    if stop.status is not None:
        status, error = stop.status, stop.reason
    # What the engine's proxy metered, unless the CLI reports more (it cannot report less).
    outcome = _outcome(
        status,
        error,
        transcript.final_text,
        max(claude.spend_input, transcript.usage.input_tokens),
        max(claude.spend_output, transcript.usage.output_tokens),
        _count_turns(transcript.events) or 1,
        stop.pending if status == "waiting" else None,
        record,
    )
    return CliSessionOutcome(outcome, transcript.cost_usd, capabilities)


#: Claude's own limits (--max-turns, --max-budget-usd) end a session as the engine's would.
CLAUDE_LIMITS: dict[str, tuple[SessionStatus, str]] = {
    "error_max_turns": ("max_turns", "claude-code reached the session's max_turns"),
    "error_max_budget_usd": ("cost_budget", "claude-code reached the session's max_cost_usd"),
}
CODEX_STATUS: dict[str, SessionStatus] = {
    "completed": "completed",
    "timed_out": "timed_out",
    "budget_exceeded": "token_budget",
    "failed": "failed",
}


def _codex_outcome(
    codex: CodexRun, capabilities: dict[str, Any], record: Record
) -> CliSessionOutcome:
    ran, stop = codex.outcome, codex.stop
    record(
        "agent.cli_result",
        {
            "exit_code": ran.exit_code,
            "session_id": ran.thread_id,
            "usage": {
                "input_tokens": ran.input_tokens,
                "output_tokens": ran.output_tokens,
                "cached_input_tokens": ran.cached_input_tokens,
            },
            "errors": [ran.error] if ran.error else [],
            "stderr": ran.stderr[-NOISE_LINES:],
        },
    )
    status, error = CODEX_STATUS[ran.status], ran.error
    if stop.status is not None:
        status, error = stop.status, stop.reason
    outcome = _outcome(
        status,
        error,
        ran.final_text,
        max(codex.spend_input, ran.input_tokens),
        max(codex.spend_output, ran.output_tokens),
        1,
        stop.pending if status == "waiting" else None,
        record,
    )
    return CliSessionOutcome(outcome, None, capabilities)


def _outcome(
    status: SessionStatus,
    error: str | None,
    final_text: str | None,
    input_tokens: int,
    output_tokens: int,
    turns: int,
    pending: dict[str, Any] | None,
    record: Record,
) -> SessionOutcome:
    """The session's outcome; a completed one's final message is read as its report."""
    parsed = parse_report(final_text)
    completed = status == "completed"
    if completed and parsed.notes:
        record("agent.report_note", {"notes": parsed.notes})
    return SessionOutcome(
        status=status,
        summary=parsed.summary if completed else (final_text or ""),
        findings=parsed.findings if completed else [],
        confidence=parsed.confidence if completed else None,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        turns=turns,
        error=error,
        pending=pending,
    )


def _cli_name(execution: AgentSession) -> CliName:
    if execution.provider == "claude-code":
        return "claude-code"
    if execution.provider == "codex":
        return "codex"
    raise ValueError(f"provider {execution.provider!r} is not a CLI agent provider")


def _not_installed(cli: CliName, binary: str) -> str:
    info = next(c for c in _CLIS if c.name == cli)
    where = "not found" if "/" in binary else "not found on PATH"
    return (
        f"{cli} is not installed: `{binary}` {where}; install it ({info.install}) "
        f"or set {info.prefix}BINARY to its path"
    )


def _split_output(output: str) -> tuple[list[str], list[str], bool]:
    """The stream's lines, the noise lines (not starting with `{`), and whether the middle of
    the output was cut (the half lines either side of the cut are dropped)."""
    lines: list[str] = []
    noise: list[str] = []
    truncated = last_json = skip = False
    for line in output.splitlines():
        text = line.strip()
        if not text:
            continue
        if skip:
            skip = False
            continue
        if _TRUNCATION.match(text):
            truncated = skip = True  # the tail starts inside a line: skip it
            if last_json:
                lines.pop()  # the head ends inside this line
            continue
        last_json = text.startswith("{")
        if last_json:
            lines.append(text)
        else:
            noise.append(text[:NOISE_LINE_CHARS])
    return lines, noise, truncated


def _count_turns(events: list[dict[str, Any]]) -> int:
    """Model turns: runs of assistant events (text, reasoning, tool calls) between results."""
    turns, in_turn = 0, False
    for event in events:
        if event["kind"] in _ASSISTANT_KINDS:
            if not in_turn:
                turns += 1
            in_turn = True
        elif event["kind"] == "agent.tool_result":
            in_turn = False
    return turns


def _result_data(result: ProcessResult, transcript: CliTranscript) -> dict[str, Any]:
    return {
        "exit_code": result.exit_code,
        "timed_out": result.timed_out,
        "cancelled": result.cancelled,
        "duration": round(result.duration, 3),
        "session_id": transcript.session_id,
        "usage": {
            "input_tokens": transcript.usage.input_tokens,
            "output_tokens": transcript.usage.output_tokens,
            "cached_input_tokens": transcript.usage.cached_input_tokens,
        },
        "cost_usd": transcript.cost_usd,
        "permission_denials": transcript.permission_denials,
        "errors": transcript.errors,
    }


def _status(
    cli: CliName, result: ProcessResult, transcript: CliTranscript, noise: list[str]
) -> tuple[SessionStatus, str | None]:
    if result.timed_out:
        return "timed_out", f"{cli} was killed at the session's deadline ({result.duration:.1f}s)"
    if result.cancelled:
        return "failed", f"{cli} was cancelled"
    if result.exit_code == 0 and transcript.ok:
        return "completed", None
    limit = CLAUDE_LIMITS.get(transcript.result_subtype or "")
    if limit is not None:
        return limit
    details = transcript.errors[:1]
    if noise:
        details.append(f"last output: {noise[-1]}")
    detail = "; ".join(details) or "no output"
    if result.exit_code != 0:
        return "failed", f"{cli} exited {result.exit_code}: {detail}"
    return "failed", f"{cli} failed: {detail}"
