"""Query functions for approvals: runs that wait for an operator's decision."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from ade_tasks.clock import utcnow
from ade_tasks.db.run_events import append_event
from ade_tasks.db.schema import QUESTION_TOOL, ApprovalRow, RunRow
from ade_tasks.errors import ConflictError, InvalidInputError, NotFoundError
from ade_tasks.json_document import JsonObject
from ade_tasks.rules.approval_policy import ApprovalPolicy, count_approval
from ade_tasks.states import ANSWER, PARK, Answer, ApprovalStatus, RunStatus


@dataclass(frozen=True)
class ToolCall:
    """The agent's tool call an approval asks about."""

    call_id: str
    tool: str
    arguments: JsonObject
    expires_at: datetime | None = None


def wait_for_approval(
    session: Session,
    run_id: str,
    worker: str,
    step_index: int,
    reason: str,
    call: ToolCall | None = None,
    policy: ApprovalPolicy | None = None,
) -> bool:
    """Park a running run in `waiting` and open its approval (a gate's under `policy`: how
    many approve it, who may not); False if it was not ours."""
    parked = session.execute(
        update(RunRow)
        .where(RunRow.id == run_id, RunRow.worker == worker, RunRow.status.in_(PARK.sources))
        .values(status=RunStatus.WAITING, lease_expires_at=None)
        .returning(RunRow.id)
    ).scalar_one_or_none()
    if parked is None:
        return False
    if approval_for(session, run_id, step_index) is None:
        session.add(
            ApprovalRow(
                run_id=run_id,
                step_index=step_index,
                reason=reason,
                status=ApprovalStatus.PENDING,
                tool_call_id=call.call_id if call else None,
                tool=call.tool if call else None,
                arguments=call.arguments if call else None,
                expires_at=call.expires_at if call else None,
                requested_at=utcnow(),
                approvals_needed=policy.needed if policy else 1,
                excluded_approver=policy.excluded if policy else None,
            )
        )
    return True


def approval_for(session: Session, run_id: str, step_index: int) -> ApprovalRow | None:
    """The approval asked for before step `step_index` of the run, if any."""
    return session.scalar(
        select(ApprovalRow).where(
            ApprovalRow.run_id == run_id, ApprovalRow.step_index == step_index
        )
    )


def pending_approval(session: Session, run_id: str) -> ApprovalRow:
    """The run's open approval, or ConflictError saying why there is none."""
    row = session.scalar(
        select(ApprovalRow)
        .where(ApprovalRow.run_id == run_id, ApprovalRow.status == ApprovalStatus.PENDING)
        .with_for_update()
    )
    if row is None:
        raise ConflictError(
            f"run {run_id!r} is not waiting for an approval; only runs in status `waiting` "
            "can be approved or rejected (see `ade-tasks runs show`)"
        )
    return row


def pending_input(session: Session, approval_id: int) -> ApprovalRow:
    """A pending input by id, locked; NotFoundError or a clear "not pending" ConflictError."""
    row = session.scalar(select(ApprovalRow).where(ApprovalRow.id == approval_id).with_for_update())
    if row is None:
        raise NotFoundError(
            f"no pending input {approval_id}; list them with `ade-tasks inputs list`"
        )
    if row.status != ApprovalStatus.PENDING:
        raise ConflictError(
            f"input {approval_id} is not pending: it was already answered "
            f"({row.answer or row.status} by {row.decided_by})"
        )
    return row


def decide(
    session: Session, row: ApprovalRow, answer: Answer, by: str, note: str | None, at: datetime
) -> None:
    """Record the answer and move the run on: back to `queued` (the caller sends it) or
    `cancelled` with the operator's reason."""
    if answer is Answer.ACCEPT_FOR_SESSION and row.tool_call_id is None:
        raise InvalidInputError(
            f"accept_for_session answers an agent's tool call; run {row.run_id!r} waits before "
            "a step: answer accept, decline or cancel"
        )
    accepted = answer in (Answer.ACCEPT, Answer.ACCEPT_FOR_SESSION)
    if accepted and row.tool_call_id is None:  # a gate: counted against its policy
        policy = ApprovalPolicy(row.approvals_needed or 1, row.excluded_approver)
        tally = count_approval(row.votes, policy, by=by, note=note, at=at, run_id=row.run_id)
        row.votes = tally.votes
        if tally.counted:
            _record(session, row, answer, by, note, len(tally.votes))
        if not tally.released:
            return  # the run stays `waiting` for the other approvals
        by = ", ".join(vote["by"] for vote in tally.votes)[:255]  # who released it
    else:
        _record(session, row, answer, by, note, len(row.votes or ()))
    row.status = {
        Answer.ACCEPT: ApprovalStatus.APPROVED,
        Answer.ACCEPT_FOR_SESSION: ApprovalStatus.APPROVED,
        Answer.DECLINE: ApprovalStatus.REJECTED,
        Answer.CANCEL: ApprovalStatus.CANCELLED,
    }[answer]
    row.answer, row.decided_by, row.decided_at, row.note = answer.value, by, at, note
    values: dict[str, object]
    if accepted or (answer is Answer.DECLINE and row.tool_call_id is not None):
        # A declined tool call is not the end of the session: the agent is told and goes on.
        values = {"status": RunStatus.QUEUED, "sent_at": at, "send_count": RunRow.send_count + 1}
    else:
        verb = "cancelled" if answer is Answer.CANCEL else "rejected"
        reason = f"{verb} by {by}" + (f": {note}" if note else "")
        values = {"status": RunStatus.CANCELLED, "finished_at": at, "error": reason}
    session.execute(
        update(RunRow)
        .where(RunRow.id == row.run_id, RunRow.status.in_(ANSWER.sources))
        .values(**values)
    )


#: The run event of each answer to a pending input (a gate's approvals one event each).
ANSWERED_EVENT = "approval.answered"


def _record(
    session: Session, row: ApprovalRow, answer: Answer, by: str, note: str | None, approvals: int
) -> None:
    """One answer in the run's events: who, what, and for a gate how many approvals it has."""
    data: JsonObject = {"input": row.id, "kind": row.kind, "answer": answer.value, "by": by}
    if note:
        data["note"] = note
    if row.tool_call_id is None:
        data |= {"approvals": approvals, "needed": row.approvals_needed or 1}
    else:
        data |= {"tool": row.tool, "call_id": row.tool_call_id}
    append_event(session, row.run_id, ANSWERED_EVENT, data, step_index=row.step_index)


def expired_inputs(session: Session, now: datetime, limit: int = 100) -> Sequence[ApprovalRow]:
    """Pending inputs past their deadline, locked for this sweep (others skip them)."""
    return session.scalars(
        select(ApprovalRow)
        .where(
            ApprovalRow.status == ApprovalStatus.PENDING,
            ApprovalRow.expires_at.is_not(None),
            ApprovalRow.expires_at < now,
        )
        .order_by(ApprovalRow.expires_at)
        .limit(limit)
        .with_for_update(skip_locked=True)
    ).all()


def list_approvals(session: Session, status: str | None = "pending") -> Sequence[ApprovalRow]:
    """Approvals, newest first (pending ones by default)."""
    stmt = select(ApprovalRow).order_by(ApprovalRow.requested_at.desc()).limit(500)
    if status:
        stmt = stmt.where(ApprovalRow.status == status)
    return session.scalars(stmt).all()


def approved_steps(session: Session, run_id: str) -> frozenset[int]:
    """Indexes of the steps an operator approved the run to start."""
    rows = session.scalars(
        select(ApprovalRow.step_index).where(
            ApprovalRow.run_id == run_id, ApprovalRow.status == ApprovalStatus.APPROVED
        )
    )
    return frozenset(rows)


def approvals_of(session: Session, run_id: str) -> Sequence[ApprovalRow]:
    """The run's approvals, in step order."""
    return session.scalars(
        select(ApprovalRow).where(ApprovalRow.run_id == run_id).order_by(ApprovalRow.step_index)
    ).all()


@dataclass(frozen=True)
class ToolDecisions:
    """What operators answered about a run's tool calls."""

    approved: frozenset[str]  # call ids
    declined: frozenset[str]  # call ids
    tools_for_session: frozenset[str]  # tool names accepted for the rest of the session
    answers: Mapping[str, str] = field(default_factory=dict)  # call id -> an answered question


def tool_decisions(session: Session, run_id: str) -> ToolDecisions:
    """The run's tool calls an operator approved or declined, the tools accepted for the
    rest of the session, and the text answers to the agent's questions."""
    rows = session.execute(
        select(
            ApprovalRow.tool_call_id,
            ApprovalRow.status,
            ApprovalRow.answer,
            ApprovalRow.tool,
            ApprovalRow.note,
        ).where(ApprovalRow.run_id == run_id, ApprovalRow.tool_call_id.is_not(None))
    ).all()
    return ToolDecisions(
        approved=frozenset(str(c) for c, s, _, _, _ in rows if s == ApprovalStatus.APPROVED),
        declined=frozenset(str(c) for c, s, _, _, _ in rows if s == ApprovalStatus.REJECTED),
        tools_for_session=frozenset(
            str(t) for _, _, a, t, _ in rows if a == Answer.ACCEPT_FOR_SESSION and t
        ),
        answers={
            str(c): str(n or "")
            for c, s, _, t, n in rows
            if s == ApprovalStatus.APPROVED and t == QUESTION_TOOL
        },
    )
