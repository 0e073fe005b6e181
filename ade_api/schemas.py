"""The API's wire schemas (pydantic), separate from the database rows they are read from."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from ade_tasks.db.schema import ApprovalRow, RunRow, RunStepRow
from ade_tasks.rules.base import Duration
from ade_tasks.rules.triggers import check_catchup_window, check_delay
from ade_tasks.scheduling import check_not_past, check_zoned
from ade_tasks.states import Answer

#: Who acts, when several people share a token: recorded after the token's name
#: (see `ade_api.auth.actor`).
By = Annotated[
    str | None, Field(default=None, max_length=255, description="who, if the token is shared")
]


class Problem(BaseModel):
    """An error body (RFC 9457 problem+json)."""

    type: str = "about:blank"
    title: str
    status: int
    detail: str


class StepOut(BaseModel):
    """One step of a run."""

    model_config = ConfigDict(from_attributes=True)

    index: int
    step_id: str
    action_type: str
    status: str
    started_at: datetime
    finished_at: datetime | None
    exit_code: int | None
    output: str
    result: dict[str, Any]
    error: str | None


class RunOut(BaseModel):
    """A run as the history shows it."""

    model_config = ConfigDict(from_attributes=True)

    id: str
    rule_id: str
    rule_version: int
    trigger_type: str
    trigger_summary: str
    trigger: dict[str, Any]
    idempotency_key: str
    status: str
    queue_status: str | None
    confidence: float | None
    billing_code: str
    usage: dict[str, Any]
    queue: str
    worker: str | None
    attempt: int
    buffered: bool = Field(description="held back by the rule's overlap policy")
    queued_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    error: str | None
    findings: list[dict[str, Any]] | None = None

    @classmethod
    def of(cls, row: RunRow) -> RunOut:
        return cls.model_validate(row)


class ApprovalOut(BaseModel):
    """A run's request for a human decision, and the decision once made."""

    model_config = ConfigDict(from_attributes=True)

    id: int
    run_id: str
    step_index: int
    reason: str
    kind: str = Field(description="question (answer with a note) | tool_call | gate")
    status: str = Field(description="pending | approved | rejected | cancelled")
    tool: str | None = Field(description="the agent's tool the input asks about (None: a gate)")
    arguments: dict[str, Any] | None = Field(description="the tool call's arguments")
    answer: str | None = Field(description="accept | accept_for_session | decline | cancel")
    requested_at: datetime
    expires_at: datetime | None = Field(description="declined unanswered at this time")
    decided_at: datetime | None
    decided_by: str | None
    note: str | None


class StepUsage(BaseModel):
    """Tokens and cost of one agent step."""

    index: int | None = Field(description="None: a step still going, counted from its events")
    step_id: str
    final: bool = Field(description="from the finished step's result (else from its events)")
    input_tokens: int
    output_tokens: int
    cost_usd: float | None
    turns: int | None = None


class AgentUsage(BaseModel):
    """What the run's agent steps spent."""

    input_tokens: int = 0
    output_tokens: int = 0
    tokens: int = 0
    cost_usd: float | None = Field(default=None, description="None: no priced model was used")
    steps: list[StepUsage] = Field(default_factory=list)


class RunDetail(RunOut):
    """A run with its steps, approvals, agent usage and capability reports."""

    steps: list[StepOut]
    approvals: list[ApprovalOut] = Field(default_factory=list)
    agent_usage: AgentUsage = Field(
        default_factory=AgentUsage, description="tokens and cost of the run's agent steps"
    )
    capabilities: list[dict[str, Any]] = Field(
        default_factory=list,
        description="the `agent.capabilities` reports of its CLI agent sessions, in order",
    )

    @classmethod
    def with_steps(
        cls,
        row: RunRow,
        steps: list[RunStepRow],
        approvals: list[ApprovalRow] | None = None,
        *,
        agent_usage: dict[str, Any] | None = None,
        capabilities: list[dict[str, Any]] | None = None,
    ) -> RunDetail:
        return cls(
            **RunOut.of(row).model_dump(),
            steps=[StepOut.model_validate(s) for s in steps],
            approvals=[ApprovalOut.model_validate(a) for a in approvals or []],
            agent_usage=AgentUsage.model_validate(agent_usage or {}),
            capabilities=capabilities or [],
        )


class RunEventOut(BaseModel):
    """One line of a run's transcript. Step progress synthesized while following a run
    (`step.started`, `step.finished`, `run.status`, `end`) has no id."""

    id: int | None
    at: datetime
    kind: str
    step_index: int | None
    data: dict[str, Any]


class RunCancel(BaseModel):
    """An operator's cancellation of a run."""

    model_config = ConfigDict(extra="forbid")

    by: By = None
    note: str | None = Field(default=None, max_length=4000)


class RunCancelled(BaseModel):
    """The cancelled run and the status it had."""

    run: RunOut
    was: str = Field(description="queued | waiting | running")
    message: str


class RunRetry(BaseModel):
    """An operator's retry of a finished run."""

    model_config = ConfigDict(extra="forbid")

    by: By = None


class RunRetried(BaseModel):
    """The new run a retry started (same rule, same trigger payload plus `retry_of`)."""

    run_id: str
    retry_of: str
    status: str
    created: bool = Field(description="false when the Idempotency-Key matched an earlier retry")
    sent: bool
    message: str
    run_url: str


class InputAnswer(BaseModel):
    """An operator's answer to a pending input."""

    model_config = ConfigDict(extra="forbid")

    answer: Answer
    by: By = None
    note: str | None = Field(default=None, max_length=4000)


class AnsweredInput(BaseModel):
    """The input as answered, and its run as it now stands."""

    input: ApprovalOut
    run: RunOut


class Decision(BaseModel):
    """An operator's approval or rejection of a waiting run."""

    model_config = ConfigDict(extra="forbid")

    by: By = None
    note: str | None = Field(default=None, max_length=4000)


class ReviewMove(BaseModel):
    """Move a run in the review queue."""

    model_config = ConfigDict(extra="forbid")

    action: str = Field(description="ignore | archive | approve")


class LaneOut(BaseModel):
    """A lane (git worktree on its own branch)."""

    model_config = ConfigDict(from_attributes=True)

    id: str
    project: str
    name: str
    branch: str
    path: str
    base_ref: str
    base_sha: str
    run_id: str | None
    status: str
    created_at: datetime
    deleted_at: datetime | None


class CleanupOut(BaseModel):
    """A deferred lane deletion."""

    model_config = ConfigDict(from_attributes=True)

    id: int
    run_id: str
    step_id: str
    lane_id: str
    due_at: datetime
    status: str = Field(description="scheduled | executing | done | failed | cancelled")
    attempts: int
    result: dict[str, Any] | None
    error: str | None
    finished_at: datetime | None


class RunPage(BaseModel):
    """One page of the run history, newest first."""

    items: list[RunOut]
    next_cursor: str | None = Field(description="pass as `cursor` to get the next page")


class TriggerHealthOut(BaseModel):
    """One trigger's delivery status (`ade_tasks.rule_health`)."""

    index: int = Field(description="its position in the rule's `triggers`")
    type: str
    ready: bool
    path: str | None = Field(description="what will fire it, e.g. `GitHub webhook`, `beat <id>`")
    error: str | None = Field(description="why nothing can fire it, and what to do")


class RuleHealthOut(BaseModel):
    """Can the rule fire: ready when no problem of the whole rule stops it (trust, provider,
    project) and every trigger has a path that fires it. Computed from live state on every
    answer; enabling a rule that is not ready is refused unless forced."""

    ready: bool
    problems: list[str] = Field(description="what stops every trigger of it")
    triggers: list[TriggerHealthOut]


class RuleOut(BaseModel):
    """A rule as stored, with its validated document and its health."""

    model_config = ConfigDict(from_attributes=True)

    id: str
    version: int
    source: str
    source_file: str | None
    content_hash: str
    enabled: bool
    trust_state: str = Field(description="trusted | untrusted (a shared file not yet trusted)")
    source_hash: str | None = Field(description="sha256 of the shared rules file, if shared")
    updated_at: datetime
    document: dict[str, Any]
    health: RuleHealthOut | None = Field(
        default=None, description="can it fire, per trigger (`rules show` prints it)"
    )


class ManualRunRequest(BaseModel):
    """Inputs of a manual run; with `run_at` or `delay_seconds` (at most one), the run is
    scheduled to fire once at that time instead of now (see `ScheduledRunOut`)."""

    model_config = ConfigDict(extra="forbid")

    inputs: dict[str, Any] = Field(default_factory=dict)
    requested_by: str = ""
    force: bool = Field(
        default=False,
        description="run even while ADE_DISABLE_AUTOMATIONS is on (admin tokens only)",
    )
    catchup_window: Duration | None = Field(
        default=None,
        description="how late a scheduled run may still fire when no beat could fire it on "
        "time (default 1 min; then it is recorded `missed`)",
    )
    run_at: datetime | None = Field(
        default=None, description="when to fire, with Z or an offset: 2026-12-24T18:00:00+01:00"
    )
    delay_seconds: int | None = Field(default=None, description="fire this many seconds from now")

    @field_validator("run_at", mode="before")
    @classmethod
    def _zoned(cls, value: Any) -> Any:
        return None if value is None else check_zoned(value, "run_at")

    @field_validator("run_at")
    @classmethod
    def _not_past(cls, value: datetime | None, info: ValidationInfo) -> datetime | None:
        if value is not None:
            value = value.astimezone(UTC)
            check_not_past(value, info.data.get("catchup_window"), "run_at")
        return value

    @field_validator("delay_seconds")
    @classmethod
    def _delay(cls, value: int | None, info: ValidationInfo) -> int | None:
        if value is None:
            return None
        if info.data.get("run_at") is not None:
            raise ValueError("give run_at or delay_seconds, not both")
        return check_delay(value, "from now")

    @field_validator("catchup_window")
    @classmethod
    def _window(cls, value: timedelta | None) -> timedelta | None:
        return check_catchup_window(value)

    def scheduled_for(self, now: datetime) -> datetime | None:
        """When the run is to fire, or None for a run now."""
        if self.run_at is not None:
            return self.run_at
        if self.delay_seconds is not None:
            return now + timedelta(seconds=self.delay_seconds)
        return None


class ScheduledRunOut(BaseModel):
    """A run scheduled to fire once (a rule's one-shot trigger, or a scheduled manual run)."""

    model_config = ConfigDict(from_attributes=True)

    id: str
    rule_id: str
    trigger_index: int | None = Field(description="the rule's trigger; null for a manual run")
    run_at: datetime
    status: str = Field(description="pending | claimed | fired | skipped | missed | cancelled")
    requested_by: str
    inputs: dict[str, Any]
    created_at: datetime
    run_id: str | None
    reason: str | None


class ManualRunAccepted(BaseModel):
    """A manual run was recorded (and, unless `sent` is false, handed to the workers)."""

    run_id: str
    status: str
    created: bool = Field(description="false when the Idempotency-Key matched an earlier run")
    sent: bool
    message: str
    run_url: str


class FireTime(BaseModel):
    """One upcoming fire of a schedule trigger."""

    utc: datetime
    local: datetime = Field(description="the same moment in the trigger's time zone")


class ScheduleTriggerPreview(BaseModel):
    """The next fire times of one schedule trigger."""

    trigger_index: int
    cron: str
    timezone: str
    next: list[FireTime]


class SchedulePreview(BaseModel):
    """The next fire times of every schedule trigger of a rule."""

    rule_id: str
    enabled: bool
    triggers: list[ScheduleTriggerPreview]


class OccurrenceOut(BaseModel):
    """A claimed schedule occurrence and what came of it."""

    model_config = ConfigDict(from_attributes=True)

    trigger_index: int
    cron: str
    slot: datetime
    outcome: str = Field(description="claimed | fired | skipped | missed")
    run_id: str | None
    reason: str | None
    claimed_by: str
    claimed_at: datetime
    duplicate_claims: int


class TrustRequest(BaseModel):
    """Trust a reviewed shared rules file by its sha256."""

    model_config = ConfigDict(extra="forbid")

    content_hash: str = Field(pattern=r"^[0-9a-f]{64}$")
    by: By = None


class TrustGranted(BaseModel):
    """The rules a trusted shared file released."""

    content_hash: str
    rules: list[str]


class HookDeliveryOut(BaseModel):
    """One delivery to a custom hook, as its delivery log keeps it."""

    model_config = ConfigDict(from_attributes=True)

    id: int
    hook_id: str
    received_at: datetime
    status_code: int
    outcome: str
    delivery_id: str | None
    event_id: int | None
    headers: dict[str, Any] = Field(description="credentials and signatures redacted")
    body: str = Field(description="the first 64 KiB")
    rejected: bool = Field(
        False, description="refused before it passed authentication (logged on its own ring)"
    )


class IngressEventOut(BaseModel):
    """A received delivery or event and what came of it."""

    model_config = ConfigDict(from_attributes=True)

    id: int
    source: str
    delivery_id: str | None
    event_key: str
    trigger_type: str | None
    summary: str
    status: str = Field(description="received | dispatched | failed")
    runs: list[str] | None
    error: str | None
    received_at: datetime
    processed_at: datetime | None
    payload: dict[str, Any]


class IngressPage(BaseModel):
    """One page of ingress events, newest first."""

    items: list[IngressEventOut]
    next_before: int | None = Field(description="pass as `before` for the next page")


class LocalEvent(BaseModel):
    """A git or file event emitted on a developer's or a git server's machine."""

    model_config = ConfigDict(extra="forbid")

    type: str = Field(description="git.commit | git.push | file.changed")
    repo: str | None = None
    branch: str | None = None
    title: str | None = None
    body: str | None = None
    author: str | None = None
    head_sha: str | None = None
    paths: list[str] = Field(default_factory=list, max_length=10_000)
    summary: str | None = None
    delivery_id: str | None = Field(default=None, max_length=255)
    fields: dict[str, str] = Field(default_factory=dict, description="extra {{trigger.fields.*}}")


class LocalEventAccepted(BaseModel):
    """A local event was stored (or was a duplicate of an earlier one)."""

    event_id: int | None
    duplicate: bool
    delivery_id: str
