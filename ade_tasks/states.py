"""The states of what the tables record, as wire values: runs, steps, claimed schedule slots,
scheduled runs, the review queue, lanes, cleanups, approvals and ingress events.

Apart from the tables (`ade_tasks.db.schema`, which re-exports them) so code that only names a
state, such as the CLI, does not load SQLAlchemy.
"""

from __future__ import annotations

from enum import StrEnum


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
