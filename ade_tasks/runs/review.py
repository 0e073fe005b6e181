"""The review queue: how confident the engine is in a finished run, and who should look at it.

Confidence = the review profile's base + min(.12, .015 x context sources)
             - max(0, threshold - .65) x .25, clamped to [.2, .95].
For built-in rules the context sources are the steps that ran (each one is evidence the result
rests on); agent sessions count what the agent read. A run below its rule's threshold (default
.65) waits in `pending-review`.

Confidence measures how far a result rests on a model's judgement, so it gates only runs that
had one. A deterministic run (a built-in chain without an agent-session step: its steps' exit
codes are the verdict) that succeeded with no findings lands in `completed-clean`, so `hello`
and a per-minute cron heartbeat do not flood the queue; a rule whose every run someone should
look at says `review_required: true`.
"""

from __future__ import annotations

from dataclasses import dataclass

from ade_tasks.states import QueueStatus, RunStatus

PROFILE_BASE = {
    "quick": 0.58,
    "incremental": 0.64,
    "full": 0.73,
    "security": 0.79,
    "release-risk": 0.75,
    "cross-repo-contract": 0.68,
}
DEFAULT_THRESHOLD = 0.65


def confidence(profile: str, context_sources: int, threshold: float = DEFAULT_THRESHOLD) -> float:
    """The run's confidence under the documented formula, rounded to 3 places."""
    value = (
        PROFILE_BASE[profile]
        + min(0.12, 0.015 * max(0, context_sources))
        - max(0.0, threshold - DEFAULT_THRESHOLD) * 0.25
    )
    return round(min(0.95, max(0.2, value)), 3)


@dataclass(frozen=True)
class Review:
    """Where a finished run lands in the review queue, and why."""

    queue_status: QueueStatus | None
    confidence: float | None


def review(
    status: RunStatus,
    *,
    profile: str,
    context_sources: int,
    threshold: float,
    findings: int,
    verification_pending: bool,
    deterministic: bool,
    review_required: bool,
) -> Review:
    """Queue status and confidence of a run that ended with `status`.

    Cancelled and skipped runs did no work worth reviewing (no queue status). Otherwise, in
    order: findings make it `actionable-findings`; a verification still owed (its command
    failed, or a required one has no command), `verification-required`, even when the failed
    verification failed the run, since that names what to do about it; a failure without
    findings, a rule that asks for review (`review_required`), or an agent's confidence below
    the threshold, `pending-review`; else `completed-clean`. A `deterministic` run's
    confidence is recorded but gates nothing.
    """
    if status in (RunStatus.CANCELLED, RunStatus.SKIPPED):
        return Review(None, None)
    value = confidence(profile, context_sources, threshold)
    unsure = value < threshold and not deterministic
    if findings:
        queue = QueueStatus.ACTIONABLE_FINDINGS
    elif verification_pending:
        queue = QueueStatus.VERIFICATION_REQUIRED
    elif status is not RunStatus.SUCCEEDED or review_required or unsure:
        queue = QueueStatus.PENDING_REVIEW
    else:
        queue = QueueStatus.COMPLETED_CLEAN
    return Review(queue, value)


#: Moves an operator may make in the queue: action -> the status it sets.
QUEUE_ACTIONS = {
    "ignore": QueueStatus.IGNORED,
    "archive": QueueStatus.ARCHIVED,
    "approve": QueueStatus.COMPLETED_CLEAN,
}
