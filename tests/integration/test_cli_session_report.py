"""The report block a CLI agent session ends with: `parse_report` reads the last JSON block of the
final message into a summary and findings, and keeps the text when there is no usable block.

The real CLIs are driven in test_claude_code_real.py and test_codex_real.py. No services needed.
"""

from __future__ import annotations

import json

import pytest

from ade_workers.agents.cli.outcome import parse_report
from tests.integration.cli_session_support import REPORT_TEXT


def test_parse_report_reads_the_last_json_block_and_drops_invalid_findings() -> None:
    report = parse_report('first try\n```json\n{"summary": "old"}\n```\n' + REPORT_TEXT)

    assert report.summary == "Two problems in the parser"
    assert report.findings == [
        {"severity": "error", "path": "src/parse.py", "line": 12, "message": "off by one"},
        {"severity": "warning", "path": "src/parse.py", "message": "slow loop"},
    ]
    assert report.confidence == 0.8
    assert len(report.notes) == 2
    assert "findings[2].severity 'catastrophic'" in report.notes[0]
    assert report.notes[1] == "findings[3] is not an object; dropped"


@pytest.mark.parametrize(
    ("text", "note"),
    [
        ("All good, nothing found.", "no ```json report block in the final message"),
        ('Done.\n```json\n{"summary": oops}\n```', "the report block is not valid JSON"),
        ("Done.\n```json\n[1, 2]\n```", "the report block is not a JSON object"),
    ],
)
def test_parse_report_without_a_usable_block_keeps_the_text_as_summary(
    text: str, note: str
) -> None:
    report = parse_report(text)

    assert report.summary == text
    assert report.findings == []
    assert report.confidence is None
    assert report.notes[0].startswith(note)


def test_parse_report_ignores_bad_confidence_and_fills_a_missing_summary() -> None:
    block = {"findings": [{"severity": "INFO", "message": "m", "line": 0}], "confidence": 7}
    report = parse_report(f"Looked at it.\n```json\n{json.dumps(block)}\n```")

    assert report.summary == "Looked at it."
    assert report.findings == [{"severity": "info", "message": "m"}]
    assert report.confidence is None
    assert len(report.notes) == 3
    assert parse_report(None).summary == ""
