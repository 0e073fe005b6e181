"""The Claude Code driver: runs `claude` headless (`claude_session.run_claude`) and records its
stream-json output as run events while it runs, then the session's outcome.

Claude's stdout and stderr arrive merged (`run_process`), and are read line by line as they
arrive (`LiveStream`), so each tool call and result is a run event as soon as Claude prints it:
a watcher of the run (`runs events -f`, the web page) follows the session, and a worker killed
mid-session leaves the calls that finished in the run's journal. Lines that do not start with
`{` are stderr noise: kept (capped) in an `agent.cli_output` event, and the last one names the
cause in a failure message. A line that starts with `{` and is not valid JSON is a stream error
(`agent.error`), so a corrupt stream fails the session. A line over `LINE_CAP` characters is
dropped and an `agent.output_truncated` event says so. Claude's capability report is recorded
again once its init event told which tools and MCP servers it really had
(`checked_against: init`).
"""

from __future__ import annotations

from collections.abc import Callable

from ade_tasks.json_document import JsonObject
from ade_workers.agents.cli.claude_session import capabilities, run_claude
from ade_workers.agents.cli.facts import CLAUDE_CODE, ClaudeStream, CliTranscript
from ade_workers.agents.cli.outcome import (
    NOISE_LINES,
    CliDriver,
    CliRun,
    CliSessionOutcome,
    session_outcome,
)
from ade_workers.agents.http_session import SessionStatus
from ade_workers.containment.process import ProcessResult

#: The longest stream line read (a tool result of megabytes fits).
LINE_CAP = 16_000_000
#: What the process's own output buffer keeps: the events come from the live stream.
OUTPUT_KEPT = 64_000
NOISE_LINE_CHARS = 500
#: Noise lines kept while the session runs (the event keeps the last NOISE_LINES of them).
NOISE_KEPT = 1000
_ASSISTANT_KINDS = frozenset({"agent.message", "agent.reasoning", "agent.tool_call"})
CLI = CLAUDE_CODE.name

CLAUDE_LIMITS: dict[str, tuple[SessionStatus, str]] = {
    "error_max_turns": ("max_turns", "claude-code reached the session's max_turns"),
    "error_max_budget_usd": ("cost_budget", "claude-code reached the session's max_cost_usd"),
}


def run(call: CliRun) -> CliSessionOutcome:
    """Run claude and record its stream's events as they arrive; then the outcome."""
    execution, setup, record = call.execution, call.setup, call.record
    live = LiveStream(record)
    claude = run_claude(
        execution,
        setup,
        prompt=call.prompt,
        system=call.system,
        deadline=call.deadline,
        should_stop=call.should_stop,
        kill_grace=call.kill_grace,
        output_cap=OUTPUT_KEPT,
        on_output=live.feed,
    )
    result, stop = claude.result, claude.stop
    transcript, noise = live.finish()
    if noise:
        record("agent.cli_output", {"lines": noise[-NOISE_LINES:], "total": live.noise_total})
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


class LiveStream:
    """Claude's output as it arrives, split into lines: stream lines are parsed and their
    events recorded at once (a watcher of the run sees each call and result as it happens),
    other lines are noise. A line longer than `LINE_CAP` is dropped and said so."""

    def __init__(self, record: Callable[[str, JsonObject], None]) -> None:
        self._record = record
        self._stream = ClaudeStream()
        self._partial: list[str] = []
        self._partial_len = 0
        self._overlong = False
        self.noise: list[str] = []
        self.noise_total = 0

    def feed(self, text: str) -> None:
        *complete, rest = text.split("\n")
        for piece in complete:
            self._partial.append(piece)
            line, self._partial, self._partial_len = "".join(self._partial), [], 0
            overlong, self._overlong = self._overlong, False
            if not overlong:
                self._line(line)
        if self._overlong:
            return
        self._partial.append(rest)
        self._partial_len += len(rest)
        if self._partial_len > LINE_CAP:
            self._partial, self._partial_len, self._overlong = [], 0, True
            self._record("agent.output_truncated", {"reason": f"a line over {LINE_CAP} characters"})

    def finish(self) -> tuple[CliTranscript, list[str]]:
        if self._partial and not self._overlong:
            self._line("".join(self._partial))
        return self._stream.finish(), self.noise

    def _line(self, line: str) -> None:
        text = line.strip()
        if not text:
            return
        if not text.startswith("{"):
            self.noise.append(text[:NOISE_LINE_CHARS])
            self.noise_total += 1
            del self.noise[:-NOISE_KEPT]
            return
        for event in self._stream.feed(text):
            self._record(event["kind"], event["data"])


def _count_turns(events: list[JsonObject]) -> int:
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


def _result_data(result: ProcessResult, transcript: CliTranscript) -> JsonObject:
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
