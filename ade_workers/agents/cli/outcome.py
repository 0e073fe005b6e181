"""What every CLI agent session ends with, whichever CLI ran it: the report instruction the
prompt ends with, the lenient parser of the report block, and the `CliSessionOutcome`; and the
`CliDriver` each CLI registers (`ade_workers.agents.cli.cli_session.CLI_DRIVERS`)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from ade_tasks.json_document import JsonObject
from ade_tasks.rules.agent import AgentSession
from ade_workers.agents.cli.facts import CapabilityReport, CliFacts
from ade_workers.agents.cli.setup import CliSetup, Stop
from ade_workers.agents.http_session import Record, SessionOutcome, SessionStatus
from ade_workers.agents.tools.notes import FINDING_SEVERITIES
from ade_workers.agents.tools.tool import Finding

NOISE_LINES = 50
_JSON_BLOCK = re.compile(r"```json[ \t]*\r?\n(.*?)\r?\n?```", re.DOTALL | re.IGNORECASE)

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
    capabilities: JsonObject


@dataclass(frozen=True)
class Report:
    """The structured end of a session's final message."""

    summary: str
    findings: list[Finding]
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
    findings: list[Finding] = []
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


def _finding(raw: object, where: str, notes: list[str]) -> Finding | None:
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
    finding: Finding = {"severity": severity, "message": message.strip()}
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


def session_outcome(
    ended: tuple[SessionStatus, str | None],
    stop: Stop,
    final_text: str | None,
    input_tokens: int,
    output_tokens: int,
    turns: int,
    record: Record,
) -> SessionOutcome:
    """The session's outcome: how the CLI `ended` (status, error) unless the engine stopped it
    (`stop`: a limit, a cancel, a wait for an answer); a completed one's final message is read
    as its report."""
    status, error = ended if stop.status is None else (stop.status, stop.reason)
    pending = stop.pending if status == "waiting" else None
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


@dataclass(frozen=True)
class CliRun:
    """What a driver's `run` gets: the session, its setup, the prompt as the CLI gets it, the
    engine's bounds, and where to record events."""

    execution: AgentSession
    setup: CliSetup
    prompt: str
    system: str | None
    deadline: float
    should_stop: Callable[[], bool]
    kill_grace: float
    capabilities: JsonObject
    record: Record


@dataclass(frozen=True)
class CliDriver:
    """One CLI agent: its facts, the capability report before it starts, a refusal of what it
    cannot enforce (None: it can), and the run (FileNotFoundError when not installed)."""

    facts: CliFacts
    capabilities: Callable[[CliSetup, AgentSession], CapabilityReport]
    refusal: Callable[[CliSetup, AgentSession], str | None]
    run: Callable[[CliRun], CliSessionOutcome]
