"""The guardrails of a rule: overlap policy, concurrency, rate, budget, run time, paths and
human approval."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import (
    Field,
)

from ade_tasks.rules.document import (
    MAX_CONCURRENT,
    MAX_RUN_SECONDS_PER_DAY,
    MAX_TOKENS,
    MAX_USD,
    RATE_LIMIT,
    Document,
    at_most,
)


class OverlapPolicy(StrEnum):
    """What a new trigger does while a run of the same rule is active."""

    SKIP = "skip"
    BUFFER_ONE = "buffer-one"
    BUFFER_ALL = "buffer-all"
    CANCEL_OTHER = "cancel-other"
    ALLOW_ALL = "allow-all"


class Budget(Document):
    """Daily caps per billing code."""

    tokens_per_day: Annotated[int | None, at_most(MAX_TOKENS)] = Field(default=None, gt=0)
    cost_per_day_usd: Annotated[float | None, at_most(MAX_USD)] = Field(default=None, gt=0)
    run_seconds_per_day: Annotated[int | None, at_most(MAX_RUN_SECONDS_PER_DAY)] = Field(
        default=None, gt=0
    )


class HumanApproval(Document):
    """Who releases a `require_human` gate: `approvals` distinct operators (counted by token
    name), and whether the run's requester may be one of them. `require_human: true` is
    one approval by anyone but the requester (four eyes); a single-operator setup writes
    `require_human: {requester_may_approve: true}`."""

    approvals: int = Field(default=1, ge=1, le=10)
    requester_may_approve: bool = False


class Guardrails(Document):
    """Limits the engine holds every run of the rule to."""

    max_duration_min: float = Field(default=60, gt=0, le=720)
    overlap: OverlapPolicy | None = None
    max_concurrent: Annotated[int | None, at_most(MAX_CONCURRENT)] = Field(default=None, ge=1)
    rate_limit: str | None = Field(default=None, pattern=RATE_LIMIT)
    budget: Budget = Field(default_factory=Budget)
    allowed_paths: list[str] = Field(default_factory=list)
    allowed_lanes: list[str] = Field(default_factory=list)
    require_human: bool | HumanApproval = False
    verify_before_publish: bool = False

    def human_approval(self) -> HumanApproval | None:
        """The gate's approval settings (None: the rule does not require a human)."""
        if isinstance(self.require_human, HumanApproval):
            return self.require_human
        return HumanApproval() if self.require_human else None

    def overlap_for(self, trigger_type: str) -> OverlapPolicy:
        """The overlap policy for a trigger: the rule's, else `skip` for schedules and
        `allow-all` for everything else."""
        if self.overlap is not None:
            return self.overlap
        return OverlapPolicy.SKIP if trigger_type == "schedule" else OverlapPolicy.ALLOW_ALL

    def concurrency_limit(self, policy: OverlapPolicy) -> int | None:
        """How many runs may be active at once under `policy` (None: no limit).

        `allow-all` is unlimited unless `max_concurrent` is set (then excess runs wait in a
        buffer); every other policy allows `max_concurrent` runs, one by default.
        """
        if policy is OverlapPolicy.ALLOW_ALL:
            return self.max_concurrent
        return self.max_concurrent or 1

    def buffer_limit(self) -> int | None:
        """The limit under which buffered runs are released (None: this rule never buffers)."""
        if self.overlap in (OverlapPolicy.SKIP, OverlapPolicy.CANCEL_OTHER):
            return None
        return self.concurrency_limit(self.overlap or OverlapPolicy.ALLOW_ALL)
