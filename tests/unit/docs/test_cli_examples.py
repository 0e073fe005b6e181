"""Docs that cannot drift (issue 37, finding 10): every `ade-tasks` command line in README.md and
the pages under docs/ parses as the CLI would parse it (`tests.unit.docs.cli_examples` says
which lines and how), and the CLI reference names every command; a page added later is checked
from its first day.
"""

from __future__ import annotations

import pytest

from tests.unit.docs.cli_examples import (
    CLI_REFERENCE,
    Invocation,
    doc_invocations,
    documented_paths,
    invocation_problems,
    invocations_in_line,
    leaf_paths,
    span_invocation,
)
from tests.unit.docs.doc_pages import ROOT, doc_files


def test_every_ade_tasks_command_in_the_docs_parses() -> None:
    invocations = [i for path in doc_files() for i in doc_invocations(path)]
    assert len(invocations) > 150, "the docs' command lines are not found"
    assert sum(i.complete for i in invocations) > 40
    problems = [p for invocation in invocations for p in invocation_problems(invocation)]
    assert not problems, "\n".join(problems)


def test_the_cli_reference_names_every_command() -> None:
    documented = documented_paths(doc_invocations(ROOT / CLI_REFERENCE))
    missing = [path for path in leaf_paths() if path not in documented]
    assert not missing, "\n".join(
        f"{CLI_REFERENCE}: no row names `ade-tasks {path}`; add one with its options"
        for path in missing
    )


@pytest.mark.parametrize(
    ("line", "complete", "wanted"),
    [
        ("ade-tasks runs shw RUN_ID", True, "does not exist (did you mean `show`?)"),
        ("ade-tasks runs list --limt 3", True, "has no option --limt"),
        ("ade-tasks runs list --limit many", True, "'many' is not a valid integer"),
        ("ade-tasks runs list --limit", True, "--limit needs a value"),
        ("ade-tasks review move keep|archive RUN_ID", False, "'keep'"),
        ("ade-tasks runs show", True, "Missing argument 'RUN_ID'"),
        ("ade-tasks runs show [--json]", True, "needs RUN_ID"),
        ("ade-tasks runs show a b", True, "takes RUN_ID"),
        ("ade-tasks runs", True, "needs a subcommand"),
        ("ade-tasks worker --loglevl INFO", True, "has no option --loglevl"),
    ],
)
def test_the_command_checks_can_fail(line: str, complete: bool, wanted: str) -> None:
    (invocation,) = invocations_in_line(line, "docs/x.md:3")
    invocation = Invocation(invocation.where, invocation.argv, complete)
    problems = invocation_problems(invocation)
    assert problems and wanted in problems[0], problems
    assert problems[0].startswith("docs/x.md:3: `ade-tasks"), problems


def test_the_command_checks_accept_what_the_cli_takes() -> None:
    for line in (
        "ADE_X=1 ade-tasks runs list --limit 3 --json | head",
        "sudo -u ade sh -c 'set -a; . /etc/ade/ade.env; exec /opt/ade/venv/bin/ade-tasks db upgrade'",
        "ade-tasks worker -Q ade.agent -c 1 -n agent@%h --loglevel INFO",
        "ade-tasks --version",
    ):
        (invocation,) = invocations_in_line(line, "docs/x.md:3")
        assert invocation_problems(invocation) == [], line
    prose = span_invocation("ade-tasks runs show", "docs/x.md:3", in_ade_cell=False)
    assert prose is not None and invocation_problems(prose) == []
