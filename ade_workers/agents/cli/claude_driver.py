"""The Claude Code driver: runs `claude` headless (`claude_session.run_claude`) and reads its
stream-json output into run events and the session's outcome.

Claude's stdout and stderr arrive merged (`run_process`). Lines that do not start with `{` are
stderr noise: kept (capped) in an `agent.cli_output` event, and the last one names the cause in
a failure message. A line that starts with `{` and is not valid JSON is a stream error
(`agent.error`), so a corrupt stream fails the session. If the output exceeded `OUTPUT_CAP`, its
middle is cut: the line cut in half is dropped and an `agent.output_truncated` event says so.
Claude's capability report is recorded again once its init event told which tools and MCP
servers it really had (`checked_against: init`).
"""

from __future__ import annotations

import re
from typing import Any

from ade_workers.agents.cli.claude_session import capabilities, run_claude
from ade_workers.agents.cli.facts import CLAUDE_CODE, CliTranscript, parse_claude_stream
from ade_workers.agents.cli.outcome import (
    NOISE_LINES,
    CliDriver,
    CliRun,
    CliSessionOutcome,
    session_outcome,
)
from ade_workers.agents.session import SessionStatus
from ade_workers.engine.process import ProcessResult

OUTPUT_CAP = 16_000_000
NOISE_LINE_CHARS = 500
_TRUNCATION = re.compile(r"^\[\.\.\. \d+ characters omitted \.\.\.\]$")
_ASSISTANT_KINDS = frozenset({"agent.message", "agent.reasoning", "agent.tool_call"})
CLI = CLAUDE_CODE.name

CLAUDE_LIMITS: dict[str, tuple[SessionStatus, str]] = {
    "error_max_turns": ("max_turns", "claude-code reached the session's max_turns"),
    "error_max_budget_usd": ("cost_budget", "claude-code reached the session's max_cost_usd"),
}


def run(call: CliRun) -> CliSessionOutcome:
    """Run claude and read its stream into events and the outcome."""
    execution, setup, record = call.execution, call.setup, call.record
    claude = run_claude(
        execution,
        setup,
        prompt=call.prompt,
        system=call.system,
        deadline=call.deadline,
        should_stop=call.should_stop,
        kill_grace=call.kill_grace,
        output_cap=OUTPUT_CAP,
    )
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
    checked = capabilities(setup, execution, transcript.init).as_dict()
    record("agent.capabilities", {**checked, "checked_against": "init"})

    # What the engine's proxy metered, unless the CLI reports more (it cannot report less).
    outcome = session_outcome(
        _status(result, transcript, noise),
        stop,
        transcript.final_text,
        max(claude.spend_input, transcript.usage.input_tokens),
        max(claude.spend_output, transcript.usage.output_tokens),
        _count_turns(transcript.events) or 1,
        record,
    )
    return CliSessionOutcome(outcome, transcript.cost_usd, checked)


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
    result: ProcessResult, transcript: CliTranscript, noise: list[str]
) -> tuple[SessionStatus, str | None]:
    cli = CLI
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


DRIVER = CliDriver(
    CLAUDE_CODE,
    capabilities=lambda setup, execution: capabilities(setup, execution, None),
    refusal=lambda _setup, _execution: None,
    run=run,
)
