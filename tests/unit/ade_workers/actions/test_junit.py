"""JUnit XML reports: counts from real reports, failing ids, findings and hostile input."""

from __future__ import annotations

from pathlib import Path

import pytest

from ade_workers.actions import junit
from ade_workers.actions.junit import JunitError, JunitSummary, parse_junit, summarize_reports
from ade_workers.actions.junit import TestCaseFailure as CaseFailure

DATA = Path(__file__).parent / "data" / "junit"


def counts(summary: JunitSummary) -> tuple[int, int, int, int, int]:
    return summary.passed, summary.failed, summary.errors, summary.skipped, summary.total


def failing_ids(summary: JunitSummary) -> list[str]:
    return [f.test_id for f in summary.failures]


def test_pytest_xunit1_report_counts_xfail_as_skipped_and_builds_node_ids() -> None:
    summary = summarize_reports([DATA / "pytest_xunit1.xml"])

    assert counts(summary) == (1, 1, 1, 2, 5)
    assert summary.failures == (
        CaseFailure(
            test_id="tests/test_sample.py::TestParser::test_fails",
            kind="failure",
            message="AssertionError: parsed value differs\nassert 'a' == 'b'\n  \n  - b\n  + a",
            path="tests/test_sample.py",
            line=15,
        ),
        CaseFailure(
            test_id="tests/test_sample.py::TestParser::test_errors",
            kind="error",
            message='failed on setup with "RuntimeError: database not reachable"',
            path="tests/test_sample.py",
            line=6,
        ),
    )


def test_pytest_default_report_without_file_uses_classname_and_the_traceback_location() -> None:
    summary = summarize_reports([DATA / "pytest_xunit2.xml"])

    assert counts(summary) == (1, 1, 1, 2, 5)
    assert failing_ids(summary) == [
        "tests.test_sample.TestParser::test_fails",
        "tests.test_sample.TestParser::test_errors",
    ]
    assert [(f.path, f.line) for f in summary.failures] == [
        ("tests/test_sample.py", 15),
        ("tests/test_sample.py", 6),
    ]


def test_nested_suites_are_counted_from_testcases_not_suite_attributes() -> None:
    summary = summarize_reports([DATA / "surefire_nested.xml"])

    # The suites claim 9 tests and no failures; a passed flaky rerun counts as passed.
    assert counts(summary) == (3, 2, 1, 1, 7)
    assert failing_ids(summary) == [
        "com.example.cart.CartTest::appliesDiscount",
        "checkout payment::refunds a cancelled order",
        "checkout::loads the gateway config",
    ]
    assert [f.kind for f in summary.failures] == ["failure", "failure", "error"]
    assert summary.failures[1].message.startswith("Error: expect(received).toBe(expected)")
    assert {(f.path, f.line) for f in summary.failures} == {(None, None)}


def test_failure_file_and_line_attributes_become_the_location() -> None:
    summary = summarize_reports([DATA / "failure_location.xml"])

    assert counts(summary) == (1, 2, 0, 1, 4)
    assert [(f.test_id, f.path, f.line) for f in summary.failures] == [
        ("src/cart.ts::no-unused-vars", "src/cart.ts", 42),
        ("src/payment.ts::eqeqeq", "src/payment.ts", 7),
    ]
    assert summary.failures[1].message == "Expected '===' and instead saw '=='.\npayment.ts:7:14"


def test_merging_reports_adds_counts_and_keeps_every_file() -> None:
    files = [DATA / "pytest_xunit1.xml", DATA / "surefire_nested.xml"]

    summary = summarize_reports(files)

    assert counts(summary) == (4, 3, 2, 3, 12)
    assert summary.files == tuple(str(f) for f in files)
    assert len(summary.failures) == 5
    assert failing_ids(summary)[0] == "tests/test_sample.py::TestParser::test_fails"


def test_no_reports_and_empty_testsuites_give_zeros() -> None:
    assert counts(summarize_reports([])) == (0, 0, 0, 0, 0)

    summary = parse_junit(b'<?xml version="1.0"?><testsuites tests="3"/>', "empty.xml")

    assert counts(summary) == (0, 0, 0, 0, 0)
    assert summary.failures == ()
    assert summary.files == ("empty.xml",)


def test_missing_attributes_still_give_an_id_and_a_message() -> None:
    data = (
        b'<testsuite><testcase><error type="SegFault"/></testcase><testcase name="t"/></testsuite>'
    )

    summary = parse_junit(data, "bare.xml")

    assert counts(summary) == (1, 0, 1, 0, 2)
    assert summary.failures == (CaseFailure("<unnamed testcase>", "error", "SegFault", None, None),)


def test_a_case_that_fails_and_then_errors_in_teardown_counts_once() -> None:
    data = (
        b'<testsuite><testcase classname="m" name="t">'
        b'<failure message="assert 1 == 2"/><error message="teardown failed"/>'
        b"</testcase></testsuite>"
    )

    summary = parse_junit(data, "twice.xml")

    assert counts(summary) == (0, 1, 0, 0, 1)
    assert summary.failures[0].message == "assert 1 == 2"


BILLION_LAUGHS = b"""<?xml version="1.0"?>
<!DOCTYPE lolz [
  <!ENTITY lol "lol">
  <!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
  <!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">
]>
<testsuite><testcase name="&lol3;"/></testsuite>
"""
EXTERNAL_ENTITY = b"""<?xml version="1.0"?>
<!DOCTYPE testsuite [<!ENTITY secret SYSTEM "file:///etc/passwd">]>
<testsuite><testcase name="&secret;"/></testsuite>
"""
PLAIN_DOCTYPE = b'<!DOCTYPE testsuite SYSTEM "junit.dtd"><testsuite/>'


@pytest.mark.parametrize(
    "data",
    [BILLION_LAUGHS, EXTERNAL_ENTITY, PLAIN_DOCTYPE, BILLION_LAUGHS.decode().encode("utf-16")],
    ids=["billion-laughs", "external-entity", "plain-doctype", "utf-16"],
)
def test_doctype_and_entity_declarations_are_refused(data: bytes) -> None:
    with pytest.raises(JunitError, match=r"^evil\.xml: line \d+: DOCTYPE/ENTITY declarations"):
        parse_junit(data, "evil.xml")


def test_malformed_xml_names_the_file_line_and_column(tmp_path: Path) -> None:
    report = tmp_path / "report.xml"
    report.write_bytes(b'<testsuite>\n  <testcase name="a">\n  </testsuite>\n')

    with pytest.raises(JunitError) as caught:
        summarize_reports([report])

    assert caught.value.message == f"{report}: malformed XML at line 3, column 5: mismatched tag"


def test_an_empty_file_is_malformed() -> None:
    with pytest.raises(JunitError, match=r"^empty\.xml: malformed XML at line 1, column 1: no"):
        parse_junit(b"", "empty.xml")


def test_a_root_other_than_testsuite_is_refused() -> None:
    with pytest.raises(JunitError, match=r"page\.xml: root element is <html>, expected"):
        parse_junit(b"<html><body/></html>", "page.xml")


def test_reports_over_the_size_cap_are_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(junit, "MAX_REPORT_BYTES", 100)
    report = tmp_path / "big.xml"
    report.write_bytes(b"<testsuite>" + b"<testcase/>" * 20 + b"</testsuite>")

    with pytest.raises(JunitError, match=r"big\.xml: report is larger than 100 bytes"):
        summarize_reports([report])


def test_an_unreadable_report_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(JunitError, match=r"missing\.xml: cannot read the report"):
        summarize_reports([tmp_path / "missing.xml"])


def test_findings_carry_one_error_per_failing_test() -> None:
    summary = summarize_reports([DATA / "pytest_xunit1.xml"])

    assert summary.findings() == [
        {
            "severity": "error",
            "kind": "test-failure",
            "test_id": "tests/test_sample.py::TestParser::test_fails",
            "message": "AssertionError: parsed value differs",
            "path": "tests/test_sample.py",
            "line": 15,
        },
        {
            "severity": "error",
            "kind": "test-failure",
            "test_id": "tests/test_sample.py::TestParser::test_errors",
            "message": 'failed on setup with "RuntimeError: database not reachable"',
            "path": "tests/test_sample.py",
            "line": 6,
        },
    ]


def test_finding_messages_are_the_first_line_capped() -> None:
    long_line = "x" * 800
    failure = CaseFailure("m::t", "failure", f"\n  {long_line}\nsecond line", None, None)
    summary = JunitSummary(0, 1, 0, 0, 1, (failure,), ("r.xml",))

    message = summary.findings()[0]["message"]

    assert len(message) == 500
    assert message == "x" * 499 + "…"


def test_result_lists_at_most_200_failing_ids_and_counts_the_rest() -> None:
    cases = b"".join(
        b'<testcase classname="m" name="t%d"><failure/></testcase>' % i for i in range(205)
    )
    summary = parse_junit(b"<testsuites><testsuite>" + cases + b"</testsuite></testsuites>", "r")

    result = summary.to_result()

    assert result["failed"] == 205
    assert len(result["failing"]) == 200
    assert result["failing"][-1] == "m::t199"
    assert result["failing_truncated"] == 5


def test_result_is_counts_files_and_failing_ids() -> None:
    summary = summarize_reports([DATA / "surefire_nested.xml"])

    assert summary.to_result() == {
        "passed": 3,
        "failed": 2,
        "errors": 1,
        "skipped": 1,
        "total": 7,
        "files": [str(DATA / "surefire_nested.xml")],
        "failing": [
            "com.example.cart.CartTest::appliesDiscount",
            "checkout payment::refunds a cancelled order",
            "checkout::loads the gateway config",
        ],
        "failing_truncated": 0,
    }


def test_a_traceback_ending_outside_the_test_file_falls_back_to_the_test_location() -> None:
    data = (
        b'<testsuite><testcase classname="tests.test_api" name="test_load" '
        b'file="tests/test_api.py" line="11"><failure message="JSONDecodeError">'
        b"/usr/lib/python3.11/json/decoder.py:355: JSONDecodeError</failure></testcase></testsuite>"
    )

    failure = parse_junit(data, "r.xml").failures[0]

    assert (failure.test_id, failure.path, failure.line) == (
        "tests/test_api.py::test_load",
        "tests/test_api.py",
        11,
    )
