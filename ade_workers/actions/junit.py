"""JUnit XML test reports: parse them into the counts and failing tests a run records.

Reports come from the project's own test command but are read as untrusted input: a DOCTYPE is
refused outright (no entity expansion, no external fetches) and the size is capped.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from xml.etree.ElementTree import Element, TreeBuilder
from xml.parsers import expat

from ade_tasks.errors import AdeError
from ade_tasks.json_document import JsonObject

MAX_REPORT_BYTES = 50 * 1024 * 1024
MAX_FAILING_IN_RESULT = 200
MAX_FINDING_MESSAGE = 500

# pytest ends each failure text with `path:line: ExceptionName`, the line that actually failed;
# it is trusted only for the test's own file so a finding never points into a library.
_TRACE_LOCATION = re.compile(r"^(?P<path>\S+?):(?P<line>\d+): \S")


class JunitError(AdeError):
    """A JUnit XML report could not be read."""


@dataclass(frozen=True)
class TestCaseFailure:
    """One test case that failed or errored, and where."""

    __test__ = False  # the name starts with "Test"; stop pytest collecting it where imported

    test_id: str
    kind: Literal["failure", "error"]
    message: str
    path: str | None
    line: int | None


@dataclass(frozen=True)
class JunitSummary:
    """Counts over every test case of one or more reports, and the failing cases."""

    passed: int
    failed: int
    errors: int
    skipped: int
    total: int
    failures: tuple[TestCaseFailure, ...]
    files: tuple[str, ...]

    def to_result(self) -> JsonObject:
        """The JSON-ready step result: counts, report files and (capped) failing test ids."""
        failing = [f.test_id for f in self.failures]
        return {
            "passed": self.passed,
            "failed": self.failed,
            "errors": self.errors,
            "skipped": self.skipped,
            "total": self.total,
            "files": list(self.files),
            "failing": failing[:MAX_FAILING_IN_RESULT],
            "failing_truncated": max(0, len(failing) - MAX_FAILING_IN_RESULT),
        }

    def findings(self) -> list[JsonObject]:
        """One error finding per failing test case."""
        return [
            {
                "severity": "error",
                "kind": "test-failure",
                "test_id": f.test_id,
                "message": _first_line(f.message),
                "path": f.path,
                "line": f.line,
            }
            for f in self.failures
        ]


def parse_junit(data: bytes, source: str) -> JunitSummary:
    """Summarize one JUnit XML document; `source` names it in errors and in `files`."""
    if len(data) > MAX_REPORT_BYTES:
        raise JunitError(
            f"{source}: report is larger than {MAX_REPORT_BYTES} bytes; "
            "split it or write a report per test module"
        )
    root = _parse_xml(data, source)
    if root.tag not in ("testsuites", "testsuite"):
        raise JunitError(
            f"{source}: root element is <{root.tag}>, expected <testsuites> or <testsuite>; "
            "is this a JUnit XML report?"
        )
    # Count test cases, not suite attributes: tools fill those inconsistently (or not at all).
    cases = list(root.iter("testcase"))
    failures: list[TestCaseFailure] = []
    skipped = 0
    for case in cases:
        failure = _failure(case)
        if failure is not None:
            failures.append(failure)
        elif case.find("skipped") is not None:
            skipped += 1
    failed = sum(1 for f in failures if f.kind == "failure")
    return JunitSummary(
        passed=len(cases) - len(failures) - skipped,
        failed=failed,
        errors=len(failures) - failed,
        skipped=skipped,
        total=len(cases),
        failures=tuple(failures),
        files=(source,),
    )


def summarize_reports(paths: Iterable[Path]) -> JunitSummary:
    """Parse every report file and add their counts up."""
    parts: list[JunitSummary] = []
    for path in paths:
        try:
            with path.open("rb") as report:
                # Read one byte past the cap so an oversized file is refused without loading it all.
                data = report.read(MAX_REPORT_BYTES + 1)
        except OSError as exc:
            raise JunitError(f"{path}: cannot read the report: {exc.strerror or exc}") from exc
        parts.append(parse_junit(data, str(path)))
    return JunitSummary(
        passed=sum(p.passed for p in parts),
        failed=sum(p.failed for p in parts),
        errors=sum(p.errors for p in parts),
        skipped=sum(p.skipped for p in parts),
        total=sum(p.total for p in parts),
        failures=tuple(f for p in parts for f in p.failures),
        files=tuple(f for p in parts for f in p.files),
    )


def _parse_xml(data: bytes, source: str) -> Element:
    """Build the element tree with expat directly, so a DOCTYPE can stop the parse."""
    builder = TreeBuilder()
    parser = expat.ParserCreate()
    parser.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)
    parser.buffer_text = True

    def refuse(*_: object) -> None:
        # Raised inside expat, so parsing stops before any entity is declared or expanded.
        raise JunitError(
            f"{source}: line {parser.CurrentLineNumber}: DOCTYPE/ENTITY declarations are refused "
            "in test reports (entity expansion); write the report without a DOCTYPE"
        )

    parser.StartDoctypeDeclHandler = refuse
    parser.EntityDeclHandler = refuse
    parser.StartElementHandler = builder.start
    parser.EndElementHandler = builder.end
    parser.CharacterDataHandler = builder.data
    try:
        parser.Parse(data, True)
    except expat.ExpatError as exc:
        # expat counts columns from 0; editors and people count from 1.
        raise JunitError(
            f"{source}: malformed XML at line {exc.lineno}, column {exc.offset + 1}: "
            f"{expat.ErrorString(exc.code)}"
        ) from None
    return builder.close()


def _failure(case: Element) -> TestCaseFailure | None:
    """The first <failure> or <error> of a test case, if any."""
    found = next((c for c in case if c.tag in ("failure", "error")), None)
    if found is None:
        return None
    text = "".join(found.itertext()).strip()
    message = (found.get("message") or "").strip() or text or found.get("type", "")
    path, line = found.get("file"), found.get("line")
    trace = _TRACE_LOCATION.match(text.splitlines()[-1]) if text else None
    if path is None and trace is not None and case.get("file") in (None, trace["path"]):
        path, line = trace["path"], trace["line"]
    elif path is None:
        # Where the test is defined, not where it failed (pytest even writes that line 0-based).
        path, line = case.get("file"), case.get("line")
    return TestCaseFailure(
        test_id=_test_id(case),
        kind="failure" if found.tag == "failure" else "error",
        message=message,
        path=path,
        line=int(line) if line is not None and line.isdigit() else None,
    )


def _test_id(case: Element) -> str:
    """pytest's node id when `file` and `classname` agree, else `classname::name`."""
    classname, name, file = case.get("classname", ""), case.get("name", ""), case.get("file")
    if file and file.endswith(".py"):
        module = file[: -len(".py")].replace("/", ".").replace("\\", ".")
        if classname == module or classname.startswith(module + "."):
            classes = classname[len(module) + 1 :]
            return "::".join([file, *(classes.split(".") if classes else []), name])
    return "::".join(part for part in (classname, name) if part) or "<unnamed testcase>"


def _first_line(message: str) -> str:
    """The first non-blank line, cut to MAX_FINDING_MESSAGE characters."""
    line = next((ln.strip() for ln in message.splitlines() if ln.strip()), "")
    if len(line) > MAX_FINDING_MESSAGE:
        return line[: MAX_FINDING_MESSAGE - 1] + "…"
    return line
