"""`run-tests`: run the project's test command and read the JUnit XML it writes.

The command finds a fresh report path in `$ADE_JUNIT_XML` (`pytest --junitxml=$ADE_JUNIT_XML`,
`jest --reporters=jest-junit` with `JEST_JUNIT_OUTPUT_FILE=$ADE_JUNIT_XML`, ...); the step's
`junit` globs name further reports, relative to its directory. Counts and failing test ids
become the step's result, each failing test a finding of the run. Failing tests fail the step
even when the command exits 0.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from ade_tasks.agents.protected import ProtectedPaths, engine_data
from ade_tasks.errors import PolicyViolationError
from ade_tasks.paths import resolve_inside
from ade_tasks.rules.steps import RunTestsAction
from ade_tasks.states import StepStatus
from ade_workers.actions.executor import StepContext, StepOutcome
from ade_workers.actions.junit import JunitError, summarize_reports
from ade_workers.actions.run_command import command_outcome, start_command
from ade_workers.sandbox.engine import exchange_directory


def run_tests(action: RunTestsAction, context: StepContext) -> StepOutcome:
    """Run the tests, then turn their reports into counts, failing ids and findings."""
    # Where the engine finds it after the command: a directory the step's sandbox shares.
    shared = exchange_directory(context.root)
    with tempfile.TemporaryDirectory(prefix="ade-junit-", dir=shared) as scratch:
        report = Path(scratch) / "junit.xml"
        run = start_command(action, context, {"ADE_JUNIT_XML": str(report)})
        if isinstance(run, StepOutcome):
            return run
        outcome = command_outcome(run, action)
        try:
            protected = ProtectedPaths(str(run.cwd), engine_data(context.settings))
            reports = _reports(action, run.cwd, report, protected)
            summary = summarize_reports(reports) if reports else None
        except (JunitError, PolicyViolationError) as exc:
            return StepOutcome(
                StepStatus.FAILED,
                outcome.exit_code,
                outcome.output,
                outcome.result,
                f"step {action.id!r}: {exc.message}",
            )
    if summary is None:
        result = {**outcome.result, "junit": "no JUnit XML report was written"}
        return StepOutcome(outcome.status, outcome.exit_code, outcome.output, result, outcome.error)
    result = {**outcome.result, **summary.to_result(), "findings": summary.findings()}
    status, error = outcome.status, outcome.error
    failing = summary.failed + summary.errors
    if failing and status is StepStatus.SUCCEEDED:
        status, error = StepStatus.FAILED, None
    if failing:
        error = f"{failing} of {summary.total} tests failed" + (f"; {error}" if error else "")
    return StepOutcome(status, outcome.exit_code, outcome.output, result, error)


def _reports(
    action: RunTestsAction, cwd: Path, report: Path, protected: ProtectedPaths
) -> list[Path]:
    """The report the command wrote to $ADE_JUNIT_XML, then the step's globs (kept inside
    the step's directory, out of the engine's data). The engine reads them once the command's
    container is empty, so no process of the step is left to swap a path after this check."""
    if report.is_symlink():
        raise PolicyViolationError(
            f"$ADE_JUNIT_XML is a symbolic link (to {os.readlink(report)}); write the report there"
        )
    found = [report] if report.is_file() else []
    for pattern in action.junit:
        for path in sorted(cwd.glob(pattern)):
            contained = resolve_inside(cwd, str(path.relative_to(cwd)), what=f"junit {pattern!r}")
            if protected.hides(str(contained)):
                raise PolicyViolationError(
                    f"junit {pattern!r} resolves to {contained}, in the engine's data directory; "
                    "name the reports the tests write"
                )
            if contained.is_file() and contained not in found:
                found.append(contained)
    return found
