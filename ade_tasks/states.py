"""The states of what the tables record, as wire values: runs, steps, claimed schedule slots,
scheduled runs, the review queue, lanes, cleanups, approvals and ingress events; and the one
table of the moves a run's status may make (`RUN_MOVES`), which every status change of a run in
`ade_tasks.db` takes its `WHERE status ...` from and checks its target against, and the statuses
a run may be created in (`INITIAL_STATUSES`), which the run insert checks.

Apart from the tables (`ade_tasks.db.schema`) so code that only names a state, such as the CLI,
does not load SQLAlchemy.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum

from ade_tasks.errors import IllegalTransitionError


class RunStatus(StrEnum):
    """Where a run is in its life (wire values)."""

    QUEUED = "queued"
    RUNNING = "running"
    WAITING = "waiting"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMED_OUT = "timed_out"
    SKIPPED = "skipped"


class StepStatus(StrEnum):
    """Where a step is in its life (wire values)."""

    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    SKIPPED = "skipped"
    WAITING = "waiting"  # an agent step parked on an operator's answer (never recorded)


class OccurrenceOutcome(StrEnum):
    """What came of a claimed schedule occurrence (wire values)."""

    CLAIMED = "claimed"
    FIRED = "fired"
    SKIPPED = "skipped"
    MISSED = "missed"


class OneShotStatus(StrEnum):
    """Where a scheduled (one-shot) run stands (wire values)."""

    PENDING = "pending"
    CLAIMED = "claimed"
    FIRED = "fired"
    SKIPPED = "skipped"
    MISSED = "missed"
    CANCELLED = "cancelled"


class QueueStatus(StrEnum):
    """Where a finished run stands in the review queue (wire values)."""

    PENDING_REVIEW = "pending-review"
    ACTIONABLE_FINDINGS = "actionable-findings"
    VERIFICATION_REQUIRED = "verification-required"
    COMPLETED_CLEAN = "completed-clean"
    IGNORED = "ignored"
    ARCHIVED = "archived"


class LaneStatus(StrEnum):
    """A lane's life (wire values)."""

    ACTIVE = "active"
    DELETED = "deleted"


class CleanupStatus(StrEnum):
    """A deferred lane deletion's life (wire values)."""

    SCHEDULED = "scheduled"
    EXECUTING = "executing"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"


class ApprovalStatus(StrEnum):
    """A human decision's life (wire values)."""

    PENDING = "pending"
    APPROVED = "approved"
    REJECTED = "rejected"
    CANCELLED = "cancelled"


class Answer(StrEnum):
    """What an operator answers a pending input (wire values).

    `accept_for_session` also lets the rest of the agent session call the same tool without
    asking; `decline` tells the agent no (a chain's gate: the run ends cancelled); `cancel`
    ends the run.
    """

    ACCEPT = "accept"
    ACCEPT_FOR_SESSION = "accept_for_session"
    DECLINE = "decline"
    CANCEL = "cancel"


class IngressStatus(StrEnum):
    """What became of an ingress event (wire values)."""

    RECEIVED = "received"  # stored; waiting for the ingress worker
    DISPATCHED = "dispatched"  # matched and dispatched (possibly to no rule)
    FAILED = "failed"  # matching or dispatching raised; the error is on the event


@dataclass(frozen=True)
class Move:
    """One named change of a run's status: the statuses it may leave and those it may reach."""

    name: str
    sources: frozenset[RunStatus]
    targets: frozenset[RunStatus]

    def check(self, was: RunStatus | str, to: RunStatus | str) -> None:
        """Refuse `was` -> `to` unless this move allows it (IllegalTransitionError)."""
        if was not in self.sources or to not in self.targets:
            raise IllegalTransitionError(
                f"a run cannot {self.name} from {was} to {to}: {self.name} moves a run from "
                f"{_names(self.sources)} to {_names(self.targets)}"
            )

    def sql_sources(self) -> str:
        """The sources as a SQL condition on `status`, for statements written as text."""
        return f"status IN ({', '.join(repr(s.value) for s in sorted(self.sources))})"


def _move(name: str, sources: Iterable[RunStatus], *targets: RunStatus) -> Move:
    return Move(name, frozenset(sources), frozenset(targets))


S = RunStatus
#: A worker takes a queued run (a repeated claim by the same worker changes no status).
CLAIM = _move("claim", [S.QUEUED], S.RUNNING)
#: A running run stops for a human decision before a step or a tool call.
PARK = _move("wait for approval", [S.RUNNING], S.WAITING)
#: The decision: back to the queue, or cancelled by the operator's answer.
ANSWER = _move("take an answer", [S.WAITING], S.QUEUED, S.CANCELLED)
#: Its worker records the run's outcome.
FINISH = _move("finish", [S.RUNNING], S.SUCCEEDED, S.FAILED, S.TIMED_OUT, S.CANCELLED, S.SKIPPED)
#: An operator, a rule's `ade-action runs.cancel` or overlap `cancel-other` ends an active run.
CANCEL = _move("cancel", [S.QUEUED, S.RUNNING, S.WAITING], S.CANCELLED)
#: The recovery sweep: a run whose worker died is queued again, or fails after too many resumes.
RESUME_LOST = _move("resume after its worker was lost", [S.RUNNING], S.QUEUED)
FAIL_LOST = _move("fail after its worker was lost", [S.RUNNING], S.FAILED)
#: The one move out of a final status: a deferred cleanup of a succeeded run failed.
FAIL_AFTER_CLEANUP = _move("fail after its cleanup failed", [S.SUCCEEDED], S.FAILED)
del S

RUN_MOVES = (CLAIM, PARK, ANSWER, FINISH, CANCEL, RESUME_LOST, FAIL_LOST, FAIL_AFTER_CLEANUP)
#: Status -> the statuses it may become, all moves together (for the docs and the tests).
RUN_TRANSITIONS: Mapping[RunStatus, frozenset[RunStatus]] = {
    status: frozenset(t for move in RUN_MOVES if status in move.sources for t in move.targets)
    for status in RunStatus
}
#: Statuses a run is created in (dispatch): queued, or skipped by a guardrail at admission.
#: The run insert refuses any other (`check_initial`): a run's later statuses are reached only
#: through the moves above, so a row written straight into `running` would bypass them.
INITIAL_STATUSES = frozenset({RunStatus.QUEUED, RunStatus.SKIPPED})
#: Statuses a run never leaves, but for `FAIL_AFTER_CLEANUP`.
FINAL_STATUSES = frozenset(
    status
    for status, targets in RUN_TRANSITIONS.items()
    if not targets or status in FAIL_AFTER_CLEANUP.sources
)


def check_initial(run_id: str, status: RunStatus | str) -> None:
    """Refuse creating run `run_id` in `status` unless it is initial (IllegalTransitionError)."""
    if status not in INITIAL_STATUSES:
        raise IllegalTransitionError(
            f"run {run_id} cannot be created {status}: a run is created "
            f"{_names(INITIAL_STATUSES)} and reaches any other status through the moves of "
            "`ade_tasks.states.RUN_MOVES`"
        )


def _names(statuses: frozenset[RunStatus]) -> str:
    return " or ".join(sorted(statuses))
