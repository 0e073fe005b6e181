"""A poller's cursors as text: they round-trip in UTC, bad text is refused naming the part, and
a corrupt legacy cursor file names the file and the way out.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from ade_tasks.db.engine import SessionFactory
from ade_tasks.errors import InvalidInputError
from ade_tasks.ingress.poll_cursors import format_cursors, parse_cursors
from ade_tasks.testing import InMemorySender
from tests.unit.ade_tasks.ingress.poller_support import REPO, FakeGithub, make_poller, rule
from tests.unit.conftest import add_rule


def test_cursor_text_round_trips_in_utc_with_lower_case_repositories() -> None:
    text = "Acme/API=2024-05-01T12:00:00+02:00|acme/web=2024-05-02T08:30:15Z|"

    cursors = parse_cursors(text)

    assert cursors == {
        "acme/api": datetime(2024, 5, 1, 10, 0, tzinfo=UTC),
        "acme/web": datetime(2024, 5, 2, 8, 30, 15, tzinfo=UTC),
    }
    formatted = format_cursors(cursors)
    assert formatted == "acme/api=2024-05-01T10:00:00Z|acme/web=2024-05-02T08:30:15Z"
    assert parse_cursors(formatted) == cursors


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("acme/api", "must look like owner/name=2024-05-01T10:00:00Z"),
        ("acme=2024-05-01T10:00:00Z", "must look like owner/name="),
        ("acme/api=yesterday", "is not an ISO 8601 time"),
        ("acme/api=2024-05-01T10:00:00", "has no zone; add Z"),
        ("acme/api=2024-05-01T10:00:00Z|ACME/api=2024-05-02T10:00:00Z", "given twice"),
    ],
)
def test_a_bad_cursor_is_refused_naming_the_part(text: str, says: str) -> None:
    with pytest.raises(InvalidInputError, match=says):
        parse_cursors(text)


def test_a_corrupt_legacy_cursor_file_names_the_file_and_the_way_out(
    session_factory: SessionFactory,
    sender: InMemorySender,
    rules_dir: Path,
    github: FakeGithub,
    cursor_file: Path,
) -> None:
    # Given the old poller's file, damaged
    add_rule(
        session_factory, rules_dir, "r", rule("r", f"{{type: github.pr_opened, repo: {REPO}}}")
    )
    cursor_file.parent.mkdir(parents=True)
    cursor_file.write_text("acme/widgets=last tuesday\n")

    # When a poller starts
    with pytest.raises(InvalidInputError) as caught:
        make_poller(session_factory, sender, github, cursor_file, since={}).cycle()

    # Then it names the file and what to do, asks GitHub nothing and leaves the file alone
    assert str(cursor_file) in caught.value.message
    assert "fix or delete the file" in caught.value.message
    assert "is not an ISO 8601 time" in caught.value.message
    assert github.calls == [] and cursor_file.exists()
