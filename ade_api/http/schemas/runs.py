"""Runs as the history shows them: a run, its steps, approvals and agent usage, its
transcript, and the operator's cancel, retry, decision and review moves."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from ade_api.http.schemas.actor import By
from ade_tasks.db.schema import ApprovalRow, RunRow, RunStepRow
from ade_tasks.json_document import JsonObject


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
    result: JsonObject
    error: str | None


class RunOut(BaseModel):
    """A run as the history shows it."""

    model_config = ConfigDict(from_attributes=True)

    id: str
    rule_id: str
    rule_version: int
    trigger_type: str
    trigger_summary: str
    trigger: JsonObject
    idempotency_key: str
    status: str
    queue_status: str | None
    confidence: float | None
    billing_code: str
    usage: JsonObject
    queue: str
    worker: str | None
    attempt: int
    buffered: bool = Field(description="held back by the rule's overlap policy")
    concurrency_key: str | None = Field(
        default=None, description="the rule's concurrency.key rendered from the trigger"
    )
    queued_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    error: str | None
    findings: list[JsonObject] | None = None

    @classmethod
    def of(cls, row: RunRow) -> RunOut:
        return cls.model_validate(row)


class ApprovalVote(BaseModel):
    """One operator's approval of a gate that needs several."""

    token: str = Field(description="the approving token's name (what is counted)")
    by: str = Field(description="as recorded: the token's name, with a shared token's `by`")
    at: datetime
    note: str | None = None


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
    arguments: JsonObject | None = Field(description="the tool call's arguments")
    answer: str | None = Field(description="accept | accept_for_session | decline | cancel")
    requested_at: datetime
    expires_at: datetime | None = Field(description="declined unanswered at this time")
    decided_at: datetime | None
    decided_by: str | None
    note: str | None
    approvals_needed: int = Field(
        default=1, description="a gate: how many tokens must approve it (require_human)"
    )
    excluded_approver: str | None = Field(
        default=None, description="a gate: the requester's token, whose approval is refused"
    )
    votes: list[ApprovalVote] | None = Field(
        default=None, description="a gate: the approvals counted so far"
    )


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
    capabilities: list[JsonObject] = Field(
        default_factory=list,
        description="the `agent.capabilities` reports of its CLI agent sessions, in order",
    )
    threads: list[JsonObject] = Field(
        default_factory=list,
        description="the durable threads its agent steps took part in (`thread:`): step, "
        "project, key, the runs the step continued, and every session the thread holds",
    )

    @classmethod
    def with_steps(
        cls,
        row: RunRow,
        steps: list[RunStepRow],
        approvals: list[ApprovalRow] | None = None,
        *,
        agent_usage: JsonObject | None = None,
        capabilities: list[JsonObject] | None = None,
        threads: list[JsonObject] | None = None,
    ) -> RunDetail:
        return cls(
            **RunOut.of(row).model_dump(),
            steps=[StepOut.model_validate(s) for s in steps],
            approvals=[ApprovalOut.model_validate(a) for a in approvals or []],
            agent_usage=AgentUsage.model_validate(agent_usage or {}),
            capabilities=capabilities or [],
            threads=threads or [],
        )


class RunEventOut(BaseModel):
    """One line of a run's transcript. Step progress synthesized while following a run
    (`step.started`, `step.finished`, `run.status`, `end`) has no id."""

    id: int | None
    at: datetime
    kind: str
    step_index: int | None
    data: JsonObject


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


class Decision(BaseModel):
    """An operator's approval or rejection of a waiting run."""

    model_config = ConfigDict(extra="forbid")

    by: By = None
    note: str | None = Field(default=None, max_length=4000)


class ReviewMove(BaseModel):
    """Move a run in the review queue."""

    model_config = ConfigDict(extra="forbid")

    action: str = Field(description="ignore | archive | approve")


class RunPage(BaseModel):
    """One page of the run history, newest first."""

    items: list[RunOut]
    next_cursor: str | None = Field(description="pass as `cursor` to get the next page")
