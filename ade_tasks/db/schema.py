"""The tables of the system of record (SQLAlchemy 2.0 declarative models)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import (
    BigInteger,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column

from ade_tasks.clock import utcnow
from ade_tasks.db import (
    notification_tables,  # noqa: F401  (likewise)
    rollup_tables,  # noqa: F401  (its tables join Base.metadata here)
    rule_index_tables,  # noqa: F401  (likewise)
    shard_tables,  # noqa: F401  (likewise)
    thread_tables,  # noqa: F401  (likewise)
)
from ade_tasks.db.model_base import NAMING_CONVENTION as NAMING_CONVENTION
from ade_tasks.db.model_base import AutoId as AutoId
from ade_tasks.db.model_base import Base as Base
from ade_tasks.db.model_base import JsonDocument as JsonDocument
from ade_tasks.db.model_base import UTCDateTime as UTCDateTime
from ade_tasks.json_document import JsonObject


class RuleRow(Base):
    """A rule as synced from a file or created through the API."""

    __tablename__ = "rules"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    version: Mapped[int] = mapped_column(Integer, default=1)
    source: Mapped[str] = mapped_column(String(16))  # file | api
    source_file: Mapped[str | None] = mapped_column(String(1024))
    content_hash: Mapped[str] = mapped_column(String(64))
    enabled: Mapped[bool] = mapped_column(Boolean)
    document: Mapped[JsonObject]
    trust_state: Mapped[str] = mapped_column(String(16), default="trusted")
    # sha256 of the file a shared-config rule came from; trust is granted to this hash.
    source_hash: Mapped[str | None] = mapped_column(String(64))
    # `rules.file_digests.file_digest` as last synced: a sync skips its file while it matches.
    file_digest: Mapped[str | None] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


#: Characters of an error that a run or step row keeps; the query functions cut the rest off.
MAX_ERROR = 4000


class RunRow(Base):
    """One execution of a rule, from the trigger that caused it to its outcome."""

    __tablename__ = "runs"
    __table_args__ = (
        Index("ix_runs_queued_at_id", "queued_at", "id"),
        Index("ix_runs_rule_id_queued_at", "rule_id", "queued_at"),
        Index("ix_runs_status_queued_at", "status", "queued_at"),
        Index("ix_runs_rule_id_status_queued_at", "rule_id", "status", "queued_at"),
        Index("ix_runs_trigger_type_queued_at", "trigger_type", "queued_at"),
        Index(
            "ix_runs_queue_status_queued_at",
            "queue_status",
            "queued_at",
            postgresql_where=text("queue_status IS NOT NULL"),
            sqlite_where=text("queue_status IS NOT NULL"),
        ),
        # Above: the history's filters (0018). Below: the metrics' tail past the rollup watermark.
        Index("ix_runs_finished_at", "finished_at"),
        # The active runs of a rule with a concurrency key (0021); rules without a key add none.
        Index(
            "ix_runs_rule_id_concurrency_key_status",
            "rule_id",
            "concurrency_key",
            "status",
            postgresql_where=text("concurrency_key IS NOT NULL"),
            sqlite_where=text("concurrency_key IS NOT NULL"),
        ),
    )

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    rule_id: Mapped[str] = mapped_column(String(64))
    rule_version: Mapped[int] = mapped_column(Integer)
    trigger_type: Mapped[str] = mapped_column(String(64))
    trigger_summary: Mapped[str] = mapped_column(String(500), default="")
    trigger: Mapped[JsonObject]
    idempotency_key: Mapped[str] = mapped_column(String(255), unique=True)
    status: Mapped[str] = mapped_column(String(16))
    queue_status: Mapped[str | None] = mapped_column(String(32))
    confidence: Mapped[float | None] = mapped_column(Float)
    billing_code: Mapped[str] = mapped_column(String(128))
    usage: Mapped[JsonObject]
    queue: Mapped[str] = mapped_column(String(128))
    worker: Mapped[str | None] = mapped_column(String(255))
    lease_expires_at: Mapped[datetime | None]
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    # Held back by the overlap policy until an active run of the rule ends; never sent meanwhile.
    buffered: Mapped[bool] = mapped_column(Boolean, default=False, server_default="0")
    send_count: Mapped[int] = mapped_column(Integer, default=0)
    sent_at: Mapped[datetime | None]
    queued_at: Mapped[datetime]
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]
    error: Mapped[str | None] = mapped_column(Text)
    # The rule's `concurrency.key` rendered from the trigger (None: the rule has no key).
    concurrency_key: Mapped[str | None] = mapped_column(String(255))
    # Findings of the run's steps (failing tests, conflicting files, ...), set when it ends.
    findings: Mapped[list[JsonObject] | None] = mapped_column(JsonDocument)


class RunStepRow(Base):
    """One step of a run: what ran, how it ended, what it printed (capped, masked)."""

    __tablename__ = "run_steps"
    __table_args__ = (UniqueConstraint("run_id", "index", name="uq_run_steps_run_id_index"),)

    id: Mapped[int] = mapped_column(AutoId, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    index: Mapped[int] = mapped_column(Integer)
    step_id: Mapped[str] = mapped_column(String(64))
    action_type: Mapped[str] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(String(16))
    started_at: Mapped[datetime]
    finished_at: Mapped[datetime | None]
    exit_code: Mapped[int | None] = mapped_column(Integer)
    output: Mapped[str] = mapped_column(Text, default="")
    result: Mapped[JsonObject]
    error: Mapped[str | None] = mapped_column(Text)


class RunEventRow(Base):
    """An append-only line of a run's transcript."""

    __tablename__ = "run_events"
    __table_args__ = (Index("ix_run_events_run_id_id", "run_id", "id"),)

    id: Mapped[int] = mapped_column(AutoId, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    at: Mapped[datetime] = mapped_column(default=utcnow)
    kind: Mapped[str] = mapped_column(String(64))
    step_index: Mapped[int | None] = mapped_column(Integer)
    data: Mapped[JsonObject]


class ScheduleOccurrenceRow(Base):
    """One (rule, trigger, cron, UTC minute) slot, claimed by exactly one beat."""

    __tablename__ = "schedule_occurrences"
    __table_args__ = (
        UniqueConstraint(
            "rule_id", "trigger_index", "cron", "slot", name="uq_schedule_occurrences_key"
        ),
        Index("ix_schedule_occurrences_slot", "slot"),
        # The notifications sweep reads the slots recorded missed lately (a small index).
        Index(
            "ix_schedule_occurrences_missed_claimed_at",
            "claimed_at",
            postgresql_where=text("outcome = 'missed'"),
            sqlite_where=text("outcome = 'missed'"),
        ),
    )

    id: Mapped[int] = mapped_column(AutoId, primary_key=True, autoincrement=True)
    rule_id: Mapped[str] = mapped_column(String(64))
    trigger_index: Mapped[int] = mapped_column(Integer)
    cron: Mapped[str] = mapped_column(String(128))
    slot: Mapped[datetime]
    claimed_by: Mapped[str] = mapped_column(String(255))
    claimed_at: Mapped[datetime]
    outcome: Mapped[str] = mapped_column(String(16))
    run_id: Mapped[str | None] = mapped_column(String(36))
    reason: Mapped[str | None] = mapped_column(Text)
    duplicate_claims: Mapped[int] = mapped_column(Integer, default=0)


class ScheduledRunRow(Base):
    """A run scheduled to fire once: a rule's `run_at`/`delay_seconds` trigger, or an operator's
    scheduled manual run (`trigger_index` None). Claimed by exactly one beat when due."""

    __tablename__ = "scheduled_runs"
    __table_args__ = (
        Index("ix_scheduled_runs_status_run_at", "status", "run_at"),
        Index("ix_scheduled_runs_rule_id_run_at", "rule_id", "run_at"),
    )

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    key: Mapped[str] = mapped_column(String(255), unique=True)
    rule_id: Mapped[str] = mapped_column(String(64))
    trigger_index: Mapped[int | None] = mapped_column(Integer)
    spec: Mapped[str | None] = mapped_column(String(64))  # the trigger's `once`, for triggers
    run_at: Mapped[datetime]
    catchup_seconds: Mapped[int | None] = mapped_column(Integer)
    inputs: Mapped[JsonObject] = mapped_column(default=dict)
    requested_by: Mapped[str] = mapped_column(String(255), default="")
    status: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    claimed_by: Mapped[str | None] = mapped_column(String(255))
    claimed_at: Mapped[datetime | None]
    run_id: Mapped[str | None] = mapped_column(String(36))
    reason: Mapped[str | None] = mapped_column(Text)


class LaneRow(Base):
    """A git worktree on its own branch, created by a run for later steps and triggers."""

    __tablename__ = "lanes"
    __table_args__ = (Index("ix_lanes_project_name", "project", "name"),)

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    project: Mapped[str] = mapped_column(String(64))
    name: Mapped[str] = mapped_column(String(255))
    branch: Mapped[str] = mapped_column(String(255))
    path: Mapped[str] = mapped_column(String(1024))
    base_ref: Mapped[str] = mapped_column(String(255))
    base_sha: Mapped[str] = mapped_column(String(64))
    run_id: Mapped[str | None] = mapped_column(String(36))
    status: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    deleted_at: Mapped[datetime | None]


class ScheduledCleanupRow(Base):
    """A lane deletion deferred by `delete-lane` with `after_minutes`, swept every 60 s."""

    __tablename__ = "scheduled_cleanups"
    __table_args__ = (Index("ix_scheduled_cleanups_status_due_at", "status", "due_at"),)

    id: Mapped[int] = mapped_column(AutoId, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(String(36))
    step_id: Mapped[str] = mapped_column(String(64))
    lane_id: Mapped[str] = mapped_column(String(36))
    force: Mapped[bool] = mapped_column(Boolean, default=False)
    delete_remote: Mapped[str | None] = mapped_column(String(255))
    delete_branch: Mapped[bool] = mapped_column(Boolean, default=True, server_default="1")
    due_at: Mapped[datetime]
    status: Mapped[str] = mapped_column(String(16))
    claimed_by: Mapped[str | None] = mapped_column(String(255))
    claimed_at: Mapped[datetime | None]
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    result: Mapped[JsonObject | None] = mapped_column(JsonDocument)
    error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    finished_at: Mapped[datetime | None]


#: The agent tool whose pending input is a question for the operator (`ApprovalRow.kind`).
QUESTION_TOOL = "ask_user"


class ApprovalRow(Base):
    """A run waiting for an operator: approve to go on, reject to stop it."""

    __tablename__ = "approvals"
    __table_args__ = (
        UniqueConstraint("run_id", "step_index", name="uq_approvals_run_id_step_index"),
        Index("ix_approvals_status", "status"),
        Index(
            "ix_approvals_expires_at",
            "expires_at",
            postgresql_where=text("status = 'pending' AND expires_at IS NOT NULL"),
        ),
    )

    id: Mapped[int] = mapped_column(AutoId, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    step_index: Mapped[int] = mapped_column(Integer)
    reason: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(16))
    # Set when an agent's tool call waits for the decision (the policy's fallback is `ask`).
    tool_call_id: Mapped[str | None] = mapped_column(String(128))
    tool: Mapped[str | None] = mapped_column(String(128))
    arguments: Mapped[JsonObject | None] = mapped_column(JsonDocument)
    answer: Mapped[str | None] = mapped_column(String(32))
    #: An unanswered tool call is declined at this time (None: it waits indefinitely).
    expires_at: Mapped[datetime | None]
    requested_at: Mapped[datetime] = mapped_column(default=utcnow)
    decided_at: Mapped[datetime | None]
    decided_by: Mapped[str | None] = mapped_column(String(255))
    note: Mapped[str | None] = mapped_column(Text)
    #: A gate's policy, fixed when the run parked (`ade_tasks.rules.approval_policy`): how
    #: many distinct tokens must approve, whose approval is refused (the requester), and the
    #: approvals counted so far ({token, by, at, note} each).
    approvals_needed: Mapped[int] = mapped_column(Integer, server_default="1")
    excluded_approver: Mapped[str | None] = mapped_column(String(255))
    votes: Mapped[list[JsonObject] | None] = mapped_column(JsonDocument)

    @property
    def kind(self) -> str:
        """`question` (the agent's ask_user: answered with text), `tool_call` (an agent's call
        waiting for approval) or `gate` (a chain's human approval)."""
        if self.tool == QUESTION_TOOL:
            return "question"
        return "tool_call" if self.tool_call_id else "gate"


class UsageRow(Base):
    """What one billing code used on one UTC day, for budget caps."""

    __tablename__ = "usage"

    billing_code: Mapped[str] = mapped_column(String(128), primary_key=True)
    day: Mapped[str] = mapped_column(String(10), primary_key=True)  # YYYY-MM-DD, UTC
    run_seconds: Mapped[float] = mapped_column(Float, default=0.0)
    tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    cost_usd: Mapped[float] = mapped_column(Float, default=0.0)


class TrustedHashRow(Base):
    """A shared rules file's content, reviewed and trusted by an admin."""

    __tablename__ = "trusted_hashes"

    content_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    trusted_by: Mapped[str] = mapped_column(String(255))
    trusted_at: Mapped[datetime] = mapped_column(default=utcnow)
    source_file: Mapped[str | None] = mapped_column(String(1024))


class IngressEventRow(Base):
    """A webhook delivery or local event, as received; the worker matches it to rules.

    Bounded at write time (see `ade_tasks.db.ingress.prune`): older than 7 days dropped, the
    newest 2,000 not yet dispatched kept, at most 10,000 of any status.
    """

    __tablename__ = "ingress_events"
    __table_args__ = (
        UniqueConstraint("source", "delivery_id", name="uq_ingress_events_source_delivery"),
        UniqueConstraint("source", "body_hash", name="uq_ingress_events_source_body_hash"),
        Index("ix_ingress_events_received_at", "received_at"),
        Index("ix_ingress_events_status_received_at", "status", "received_at"),
    )

    id: Mapped[int] = mapped_column(AutoId, primary_key=True, autoincrement=True)
    source: Mapped[str] = mapped_column(String(80))  # github | webhook:<hook> | git | file | ...
    delivery_id: Mapped[str | None] = mapped_column(String(255))
    event_key: Mapped[str] = mapped_column(String(128))
    trigger_type: Mapped[str | None] = mapped_column(String(64))
    summary: Mapped[str] = mapped_column(String(500), default="")
    body_hash: Mapped[str | None] = mapped_column(String(64))
    payload: Mapped[JsonObject]
    status: Mapped[str] = mapped_column(String(16))
    runs: Mapped[list[str] | None] = mapped_column(JsonDocument)
    error: Mapped[str | None] = mapped_column(Text)
    # What matching made of each candidate rule, bounded (`ade_tasks.triggers.verdicts`), or
    # that the event is held by the kill switch; None before matching (and for older events).
    matching: Mapped[JsonObject | None] = mapped_column(JsonDocument)
    received_at: Mapped[datetime]
    processed_at: Mapped[datetime | None]
    # Claims by workers before matching (`triggers.ingress_events`): one that kills each is failed.
    attempts: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    claimed_at: Mapped[datetime | None]


class HookDeliveryRow(Base):
    """One delivery to a custom webhook, accepted or not. Two rings per hook, the newest 50 of
    each kept: deliveries that passed authentication, and those `rejected` before it did."""

    __tablename__ = "hook_deliveries"
    __table_args__ = (Index("ix_hook_deliveries_hook_id_rejected_id", "hook_id", "rejected", "id"),)

    id: Mapped[int] = mapped_column(AutoId, primary_key=True, autoincrement=True)
    hook_id: Mapped[str] = mapped_column(String(64))
    received_at: Mapped[datetime]
    status_code: Mapped[int] = mapped_column(Integer)
    outcome: Mapped[str] = mapped_column(Text)
    delivery_id: Mapped[str | None] = mapped_column(String(255))
    event_id: Mapped[int | None] = mapped_column(BigInteger().with_variant(Integer(), "sqlite"))
    headers: Mapped[JsonObject]
    body: Mapped[str] = mapped_column(Text, default="")
    rejected: Mapped[bool] = mapped_column(Boolean, default=False, server_default="0")


class HookRateRow(Base):
    """Deliveries to a hook per minute, for its rate limit (shared by every API process).
    Deliveries refused before authentication count apart, under `<hook>/rejected`."""

    __tablename__ = "hook_rates"

    hook_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    window: Mapped[datetime] = mapped_column(primary_key=True)
    count: Mapped[int] = mapped_column(Integer, default=0)


class ApiTokenRow(Base):
    """A bearer token for the API, stored as the SHA-256 of its secret (never the secret)."""

    __tablename__ = "api_tokens"
    __table_args__ = (Index("ix_api_tokens_token_hash", "token_hash", unique=True),)

    id: Mapped[int] = mapped_column(AutoId, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(128))
    role: Mapped[str] = mapped_column(String(16))
    token_hash: Mapped[str] = mapped_column(String(64))
    prefix: Mapped[str] = mapped_column(String(16))  # shown in listings to tell tokens apart
    created_at: Mapped[datetime]
    created_by: Mapped[str] = mapped_column(String(128))
    last_used_at: Mapped[datetime | None]
    revoked_at: Mapped[datetime | None]


class AuditRow(Base):
    """One state-changing API call: who, what, when, and how it ended."""

    __tablename__ = "audit_log"
    __table_args__ = (Index("ix_audit_log_at", "at"),)

    id: Mapped[int] = mapped_column(AutoId, primary_key=True, autoincrement=True)
    at: Mapped[datetime]
    actor: Mapped[str] = mapped_column(String(128))
    role: Mapped[str] = mapped_column(String(16))
    method: Mapped[str] = mapped_column(String(8))
    path: Mapped[str] = mapped_column(String(512))
    status_code: Mapped[int] = mapped_column(Integer)


class RuleVersionRow(Base):
    """One version of a rule, append-only: what it was, who made it, when and how.

    Every change of a rule's document gets a row (created or updated through the API, added or
    changed by a sync of the rules directory), and so does a deletion, so the history of a rule
    outlives the rule itself. `version` continues across a delete and re-create of the same id.
    """

    __tablename__ = "rule_versions"
    __table_args__ = (
        UniqueConstraint("rule_id", "version", name="uq_rule_versions_rule_id_version"),
    )

    id: Mapped[int] = mapped_column(AutoId, primary_key=True, autoincrement=True)
    rule_id: Mapped[str] = mapped_column(String(64))
    version: Mapped[int] = mapped_column(Integer)
    change: Mapped[str] = mapped_column(String(16))  # created | updated | deleted
    source: Mapped[str] = mapped_column(String(16))  # file | api
    source_file: Mapped[str | None] = mapped_column(String(1024))
    content_hash: Mapped[str] = mapped_column(String(64))
    document: Mapped[JsonObject]
    changed_by: Mapped[str] = mapped_column(String(255))
    changed_at: Mapped[datetime] = mapped_column(default=utcnow)


class HeartbeatRow(Base):
    """The newest sign of life of one long-running process that fires rules (a beat, a GitHub
    poller), so rule health can tell whether something will fire a trigger. One row per process,
    updated in place; rows of processes gone for a day are dropped by the next heartbeat."""

    __tablename__ = "heartbeats"

    process_id: Mapped[str] = mapped_column(String(255), primary_key=True)
    kind: Mapped[str] = mapped_column(String(16))  # beat | poller
    started_at: Mapped[datetime]
    seen_at: Mapped[datetime]
    #: Seconds until this process's next heartbeat (a poller: its next cycle, backoff included).
    every_seconds: Mapped[float] = mapped_column(Float)
    detail: Mapped[JsonObject]


#: `rule_pauses.trigger_index` of a pause that holds the whole rule (every automatic trigger).
WHOLE_RULE = -1


class RulePauseRow(Base):
    """A paused rule (trigger_index `WHOLE_RULE`) or one paused trigger of it: who paused it,
    when and why. Resuming deletes the row; the audit log keeps both calls."""

    __tablename__ = "rule_pauses"

    rule_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    trigger_index: Mapped[int] = mapped_column(Integer, primary_key=True)
    note: Mapped[str] = mapped_column(String(1000))
    paused_by: Mapped[str] = mapped_column(String(255))
    paused_at: Mapped[datetime]


class IngressCursorRow(Base):
    """How far one ingress source has been read: a GitHub poller's `owner/name=ISO|...` cursor,
    a relay drain's last event id. Written by whichever process holds that source's claim, in
    the same transaction as the events it covers, so a failover resumes where the last one
    stopped and nothing is synthesized twice."""

    __tablename__ = "ingress_cursors"

    source: Mapped[str] = mapped_column(String(255), primary_key=True)
    value: Mapped[str] = mapped_column(Text)
    updated_at: Mapped[datetime]
    updated_by: Mapped[str] = mapped_column(String(255))
