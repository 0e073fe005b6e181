"""One headless session of a CLI agent provider (`claude-code`, `codex`) in a worktree.

`run_cli_session` turns an `agent-session` rule into the CLI's command line, runs it with
`run_process` (a container of its own, the run's deadline, `should_stop`, a kill of everything it
started) and turns its JSONL stream into the same run events and `SessionOutcome` the HTTP tool
loop gives.

Choices, in order of what happens:

- The capability report (what the policy and permission mode become on this CLI, aspect by
  aspect) is recorded as `agent.capabilities` before the process starts, so a downgrade is
  never silent.
- The CLI's own tools run, under the CLI's own permission system: the engine does not see the
  calls before they run, so there is no `ask` / approval wait and no resuming mid-session. A
  redelivered run starts a fresh CLI session.
- The prompt ends with an instruction to finish with a fenced ```json block
  `{"summary", "findings", "confidence"}`; `parse_report` reads it leniently from the final
  message (no block or a broken one: the whole final message is the summary, no findings;
  invalid findings are dropped and listed in an `agent.report_note` event).
- `codex exec` has no system prompt flag (the capability report says so): the `system` text is
  put before the prompt instead, under an "Instructions" heading.
- stdout and stderr arrive merged (`run_process`). Lines that do not start with `{` are treated
  as stderr noise: they are not parsed, but kept (capped) in an `agent.cli_output` event and the
  last one names the cause in a failure message. A line that starts with `{` and is not valid
  JSON is a stream error (`agent.error`), so a corrupt stream fails the session.
- The output is parsed once the process has ended (not streamed); events are then recorded in
  stream order, followed by one `agent.cli_result` event with the exit code, session id, usage,
  cost, permission denials and errors. If the output exceeded `OUTPUT_CAP`, its middle is cut:
  the line cut in half is dropped and an `agent.output_truncated` event says so.
- Secrets are masked (`masker`) in the output before anything is parsed or recorded.

The return value is a `CliSessionOutcome`: the `SessionOutcome` plus the session's cost in USD
(claude reports it; codex does not) and the capability report, since `SessionOutcome` has no
room for either.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ade_tasks.rules.models import AgentSession
from ade_tasks.secrets import Masker
from ade_workers.agents.claude_session import ClaudeSetup, Stop, run_claude
from ade_workers.agents.claude_session import capabilities as claude_capabilities
from ade_workers.agents.cli_agents import (
    _CLIS,
    CliName,
    CliTranscript,
    capability_report,
    claude_code_argv,
    codex_argv,
    parse_claude_stream,
    parse_codex_stream,
)
from ade_workers.agents.session import Record, SessionOutcome, SessionStatus
from ade_workers.agents.tools import FINDING_SEVERITIES
from ade_workers.process import ProcessResult, run_process

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


#: The engine's tool names as Claude Code calls its own tools; other names pass through, so a
#: policy may also name Claude's tools (e.g. `Bash(git diff:*)`). `report` is the final
#: message's json block there, so it is never a flag.
CLAUDE_TOOL_NAMES = {
    "read_file": "Read",
    "list_dir": "LS",
    "glob": "Glob",
    "grep": "Grep",
    "write_file": "Write",
    "edit_file": "Edit",
    "bash": "Bash",
    "todo": "TodoWrite",
}


def claude_tools(names: list[str]) -> list[str]:
    """Policy tool names as `--allowedTools` / `--disallowedTools` values."""
    return [CLAUDE_TOOL_NAMES.get(name, name) for name in names if name != "report"]


def cli_argv(execution: AgentSession, *, binary: str, prompt: str, system: str | None) -> list[str]:
    """The command line of one headless session of `execution.provider`."""
    cli = _cli_name(execution)
    text = session_prompt(cli, prompt, system)
    if cli == "codex":
        return codex_argv(
            text, model=execution.model, permission_mode=execution.permission_mode, binary=binary
        )
    return claude_code_argv(
        text,
        model=execution.model,
        max_turns=execution.max_turns,
        permission_mode=execution.permission_mode,
        allowed_tools=claude_tools(execution.policy.allowed_tools),
        denied_tools=claude_tools(execution.policy.denied_tools),
        system=system,
        system_mode=execution.system_mode,
        binary=binary,
    )


def run_cli_session(
    execution: AgentSession,
    *,
    binary: str,
    prompt: str,
    system: str | None,
    worktree: Path,
    env: Mapping[str, str],
    deadline: float,
    should_stop: Callable[[], bool],
    kill_grace: float,
    record: Record,
    masker: Masker | None = None,
    claude: ClaudeSetup | None = None,
) -> CliSessionOutcome:
    """Run one headless session of the CLI `execution.provider` names in `worktree`
    (Claude Code bounded by the engine as `claude` sets up, see `claude_session`)."""
    cli = _cli_name(execution)
    if claude is not None:
        report = claude_capabilities(claude, execution, None)
    else:
        report = capability_report(cli, execution.policy, execution.permission_mode, system=system)
    capabilities = report.as_dict()
    record("agent.capabilities", capabilities)

    def ended(status: SessionStatus, error: str, turns: int = 0) -> CliSessionOutcome:
        outcome = SessionOutcome(status, "", [], None, 0, 0, turns, error, None)
        return CliSessionOutcome(outcome, None, capabilities)

    timeout = deadline - time.monotonic()
    if timeout <= 0:
        return ended("timed_out", f"the session's deadline passed before {cli} started")
    if should_stop():
        return ended("failed", f"{cli} was cancelled before it started")
    stop: Stop | None = None
    spent: tuple[int, int] | None = None
    try:
        if claude is not None:
            ran = run_claude(
                execution,
                claude,
                prompt=session_prompt(cli, prompt, system),
                system=system,
                deadline=deadline,
                should_stop=should_stop,
                kill_grace=kill_grace,
                output_cap=OUTPUT_CAP,
            )
            result, stop, spent = ran.result, ran.stop, (ran.spend_input, ran.spend_output)
        else:
            result = run_process(
                cli_argv(execution, binary=binary, prompt=prompt, system=system),
                cwd=worktree,
                env=env,
                timeout=timeout,
                kill_grace=kill_grace,
                should_stop=should_stop,
                cap=OUTPUT_CAP,
                masker=masker,
            )
    except FileNotFoundError:
        return ended("failed", _not_installed(cli, binary))
    except OSError as exc:
        return ended("failed", f"{cli} could not be started (`{binary}`): {exc}")

    lines, noise, truncated = _split_output(result.output)
    transcript = (parse_codex_stream if cli == "codex" else parse_claude_stream)(lines)
    if truncated:
        record("agent.output_truncated", {"reason": f"over {OUTPUT_CAP} characters of output"})
    for event in transcript.events:
        record(event["kind"], event["data"])
    if noise:
        record("agent.cli_output", {"lines": noise[-NOISE_LINES:], "total": len(noise)})
    record("agent.cli_result", _result_data(result, transcript))
    if claude is not None:
        capabilities = claude_capabilities(claude, execution, transcript.init).as_dict()
        record("agent.capabilities", {**capabilities, "checked_against": "init"})

    turns = _count_turns(transcript.events) or 1
    status, error = _status(cli, result, transcript, noise)
    if stop is not None and stop.status is not None:
        status, error = stop.status, stop.reason
    parsed = parse_report(transcript.final_text)
    if status == "completed" and parsed.notes:
        record("agent.report_note", {"notes": parsed.notes})
    completed = status == "completed"
    # What the engine's proxy metered, unless the CLI reports more (it cannot report less).
    metered_in, metered_out = spent or (0, 0)
    input_tokens = max(metered_in, transcript.usage.input_tokens)
    output_tokens = max(metered_out, transcript.usage.output_tokens)
    outcome = SessionOutcome(
        status=status,
        summary=parsed.summary if completed else (transcript.final_text or ""),
        findings=parsed.findings if completed else [],
        confidence=parsed.confidence if completed else None,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        turns=turns,
        error=error,
        pending=stop.pending if stop is not None and status == "waiting" else None,
    )
    return CliSessionOutcome(outcome, transcript.cost_usd, capabilities)


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
    details = transcript.errors[:1]
    if noise:
        details.append(f"last output: {noise[-1]}")
    detail = "; ".join(details) or "no output"
    if result.exit_code != 0:
        return "failed", f"{cli} exited {result.exit_code}: {detail}"
    return "failed", f"{cli} failed: {detail}"
