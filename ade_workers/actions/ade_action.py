"""The `ade-action` step: one allow-listed internal action
(`ade_tasks.rules.ade_actions.CATALOG`).

The chain has already resolved the step's `${env:NAME}` secrets and rendered its `{{...}}`
templates. The executor drops identity arguments (a rule acts as itself), validates the
arguments against the action's model (a failure fails the step with each wrong argument),
re-checks admin-only actions, and calls one small function per action.

Who counts as admin: rules have no author role yet (tokens and roles arrive with a later
change). A rule whose row in the rules table has `source == "file"` came from the cluster's
rules directory, which whoever administers the cluster writes, so it counts as admin; any
other source (rules created through the API) does not, and its admin-only actions fail.

Side effects carry the run id and step id: `github.comment` upserts the comment marked
`run=<run id> step=<step id>`, so a retried run edits its comment instead of posting another;
`notify.send` puts the marker in the message and records the delivery in the run's events, so
a step executed again in the same run does not post twice (a webhook cannot be searched).
`github.add_labels` is idempotent by nature.

Every state change is one conditional statement (the step's sessions commit each statement on
their own on PostgreSQL), so racing a worker or the cleanup sweep never half-applies it.
`runs.cancel` cancels a queued, running or waiting run of any rule: a running run's worker
notices within about a second (it reads the run's row twice a second) and stops its step; a
waiting run's open approval is closed as rejected. A run cannot cancel itself. `rules.enable`
and `rules.disable` set the rule's `enabled` flag; for a rule from a file, the file's
`enabled` applies again the next time the file changes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from ade_tasks.db import lanes as lanes_db
from ade_tasks.db import rule_edits as rule_edits_db
from ade_tasks.db import run_cancels as run_cancels_db
from ade_tasks.db import run_events as run_events_db
from ade_tasks.db import runs as runs_db
from ade_tasks.db.schema import (
    LaneRow,
    RuleRow,
    RunEventRow,
    ScheduledCleanupRow,
)
from ade_tasks.errors import (
    AdeError,
    ConflictError,
    IllegalTransitionError,
    PolicyViolationError,
)
from ade_tasks.json_document import JsonObject
from ade_tasks.retry import RetryPolicy
from ade_tasks.rules.ade_actions import (
    CATALOG,
    CleanupsCancelArgs,
    CleanupsListArgs,
    GithubCommentArgs,
    GithubLabelsArgs,
    LanesListArgs,
    NotifySendArgs,
    RuleIdArgs,
    RunsCancelArgs,
    strip_identity,
    validate_args,
)
from ade_tasks.rules.steps import AdeActionStep
from ade_tasks.states import CleanupStatus, RunStatus, StepStatus
from ade_workers.actions.executor import StepContext, StepOutcome
from ade_workers.integrations.github import GithubClient
from ade_workers.integrations.notify import send_notification

#: The run event that records a notification as delivered by a step.
NOTIFY_SENT = "ade-action.notify.sent"
#: Lines of a listing shown in the step's output (the result holds all of them).
SHOWN = 50
HTTP_POLICY = RetryPolicy(attempts=3)


@dataclass(frozen=True)
class Call:
    """One execution of an `ade-action` step: the step, its context, its marker and deadline."""

    step: AdeActionStep
    context: StepContext
    deadline: float

    @property
    def marker(self) -> str:
        """What identifies this step's side effects across retries of the run."""
        return f"run={self.context.run_id} step={self.context.step_id or self.step.id}"

    def session(self) -> AbstractContextManager[Session]:
        """A transaction on the step's database sessions."""
        return self.context.sessions.begin()


def ade_action(action: AdeActionStep, context: StepContext) -> StepOutcome:
    """Run one allow-listed internal action with its validated arguments."""
    where = f"step {action.id!r}: ade-action {action.action!r}"
    spec = CATALOG.get(action.action)
    handler = HANDLERS.get(action.action)
    if spec is None or handler is None:
        # The rule was validated at load time, but a worker may run an older catalog.
        return _failed(f"{where} is not available on this worker; update the workers")
    args, notes = strip_identity(action.args)
    try:
        parsed = validate_args(action.action, args)
    except AdeError as exc:
        return _failed(f"step {action.id!r}: {exc.message}", notes)
    budget = max(min(context.time_left(), action.timeout_sec), 0.0)
    call = Call(action, context, time.monotonic() + budget)
    try:
        if spec.admin_only:
            _require_admin(call)
        outcome = handler(parsed, call)
    except AdeError as exc:
        return _failed(f"{where}: {exc.message}", notes)
    if not notes:
        return outcome
    output = "\n".join([*(f"note: {note}" for note in notes), outcome.output])
    return StepOutcome(
        outcome.status,
        outcome.exit_code,
        output,
        {**outcome.result, "notes": notes},
        outcome.error,
    )


def _failed(error: str, notes: list[str] | None = None) -> StepOutcome:
    result: JsonObject = {"notes": notes} if notes else {}
    return StepOutcome(StepStatus.FAILED, result=result, error=error)


def _require_admin(call: Call) -> None:
    """Admin-only actions need a rule from the cluster's own rules directory (source `file`,
    not from its `shared/` subdirectory: shared config is another team's, trusted to run but
    not to administer the cluster)."""
    rule_id = call.context.rule.id
    with call.session() as session:
        row = session.execute(
            select(RuleRow.source, RuleRow.source_hash).where(RuleRow.id == rule_id)
        ).first()
    source = row.source if row else None
    if source == "file" and row is not None and row.source_hash is not None:
        source = "shared config"
    if source != "file":
        raise PolicyViolationError(
            f"this action is admin-only, and rule {rule_id!r} is not from the cluster's rules "
            f"directory (its source is {source or 'unknown'!r}); only rules the cluster's "
            "administrators put in the rules directory may call it"
        )


# --- runs and rules ---------------------------------------------------------------------------


def runs_cancel(args: RunsCancelArgs, call: Call) -> StepOutcome:
    """Cancel a queued, running or waiting run of any rule, as an operator's cancel does
    (`ade_tasks.db.runs.cancel_run`: its steps, approvals and transcript settled alike)."""
    context = call.context
    if args.run_id == context.run_id:
        raise ConflictError(
            f"run {args.run_id} cannot cancel itself; to end a chain early, let a step fail "
            "or give the later steps a condition"
        )
    by = f"rule {context.rule.id} run {context.run_id}"
    with call.session() as session:
        try:
            row, status = run_cancels_db.cancel_run(session, args.run_id, by)
        except IllegalTransitionError:
            row = runs_db.get_run(session, args.run_id)
            status, cancelled = row.status, False
        else:
            cancelled = True
        rule_id = row.rule_id
    result = {"run_id": args.run_id, "rule_id": rule_id, "cancelled": cancelled, "status": status}
    if not cancelled:
        output = f"run {args.run_id} of rule {rule_id!r} had already ended ({status})"
        return StepOutcome(StepStatus.SUCCEEDED, output=output, result=result)
    output = f"cancelled run {args.run_id} of rule {rule_id!r} (it was {status})"
    if status == RunStatus.RUNNING:
        output += "; its worker stops it within about a second"
    return StepOutcome(StepStatus.SUCCEEDED, output=output, result=result)


def rules_enable(args: RuleIdArgs, call: Call) -> StepOutcome:
    """Enable a rule's automatic triggers."""
    return _set_enabled(args.rule_id, True, call)


def rules_disable(args: RuleIdArgs, call: Call) -> StepOutcome:
    """Disable a rule's automatic triggers (manual runs stay possible)."""
    return _set_enabled(args.rule_id, False, call)


def _set_enabled(rule_id: str, enabled: bool, call: Call) -> StepOutcome:
    with call.session() as session:
        _, changed = rule_edits_db.set_enabled(session, rule_id, enabled)
    state, before = ("enabled", "disabled") if enabled else ("disabled", "enabled")
    output = f"rule {rule_id!r} is {state}" + (f" (was {before})" if changed else "")
    return StepOutcome(
        StepStatus.SUCCEEDED,
        output=output,
        result={"rule_id": rule_id, "enabled": enabled, "changed": changed},
    )


# --- lanes and cleanups -------------------------------------------------------------------------


def lanes_list(args: LanesListArgs, call: Call) -> StepOutcome:
    """List lanes, newest first."""
    status = None if args.status == "all" else str(args.status)
    with call.session() as session:
        rows = lanes_db.list_lanes(session, status)
        lanes = [_lane_item(row) for row in rows]
        lines = [f"{row.name}  {row.branch}  {row.status}  ({row.project})" for row in rows]
    output = _listing(f"{len(lanes)} lane(s) ({args.status})", lines)
    return StepOutcome(
        StepStatus.SUCCEEDED, output=output, result={"lanes": lanes, "count": len(lanes)}
    )


def _lane_item(row: LaneRow) -> JsonObject:
    return {
        "id": row.id,
        "project": row.project,
        "name": row.name,
        "branch": row.branch,
        "path": row.path,
        "base_ref": row.base_ref,
        "base_sha": row.base_sha,
        "run_id": row.run_id,
        "status": row.status,
        "created_at": row.created_at.isoformat(),
        "deleted_at": row.deleted_at.isoformat() if row.deleted_at else None,
    }


def cleanups_list(args: CleanupsListArgs, call: Call) -> StepOutcome:
    """List deferred lane deletions, soonest first."""
    status = None if args.status == "all" else str(args.status)
    with call.session() as session:
        rows = lanes_db.list_cleanups(session, status)
        cleanups = [_cleanup_item(row) for row in rows]
        lines = [
            f"#{row.id}  {row.status}  due {row.due_at:%Y-%m-%d %H:%M} UTC  lane {row.lane_id}"
            for row in rows
        ]
    output = _listing(f"{len(cleanups)} scheduled cleanup(s) ({args.status})", lines)
    return StepOutcome(
        StepStatus.SUCCEEDED,
        output=output,
        result={"cleanups": cleanups, "count": len(cleanups)},
    )


def _cleanup_item(row: ScheduledCleanupRow) -> JsonObject:
    return {
        "id": row.id,
        "run_id": row.run_id,
        "step_id": row.step_id,
        "lane_id": row.lane_id,
        "due_at": row.due_at.isoformat(),
        "status": row.status,
        "attempts": row.attempts,
        "error": row.error,
        "finished_at": row.finished_at.isoformat() if row.finished_at else None,
    }


def cleanups_cancel(args: CleanupsCancelArgs, call: Call) -> StepOutcome:
    """Cancel a deferred lane deletion that has not started; its lane stays. Cancelling one
    already cancelled succeeds and says so (a retried run does it again)."""
    cleanup_id = args.cleanup_id
    with call.session() as session:
        try:
            lanes_db.cancel_cleanup(session, cleanup_id)
        except ConflictError:
            status = session.scalar(
                select(ScheduledCleanupRow.status).where(ScheduledCleanupRow.id == cleanup_id)
            )
            if status != CleanupStatus.CANCELLED:
                raise
            output, cancelled = f"scheduled cleanup #{cleanup_id} was already cancelled", False
        else:
            output, cancelled = f"cancelled scheduled cleanup #{cleanup_id}; its lane stays", True
    result = {"cleanup_id": cleanup_id, "cancelled": cancelled, "status": CleanupStatus.CANCELLED}
    return StepOutcome(StepStatus.SUCCEEDED, output=output, result=result)


def _listing(head: str, lines: list[str]) -> str:
    shown = lines[:SHOWN]
    more = [f"... and {len(lines) - SHOWN} more (see the step's result)"] if lines[SHOWN:] else []
    return "\n".join([head, *shown, *more])


# --- GitHub and notifications -----------------------------------------------------------------


def github_comment(args: GithubCommentArgs, call: Call) -> StepOutcome:
    """Post the step's comment, or update it when a retried run posted it before."""
    with _github(call, args.repo) as client:
        comment = client.upsert_comment(
            args.repo, args.number, args.body, call.marker, deadline=call.deadline
        )
    verb = "commented on" if comment.created else "updated the comment on"
    return StepOutcome(
        StepStatus.SUCCEEDED,
        output=f"{verb} {args.repo}#{args.number}: {comment.url}",
        result={"url": comment.url, "comment_id": comment.id, "created": comment.created},
    )


def github_add_labels(args: GithubLabelsArgs, call: Call) -> StepOutcome:
    """Add labels to an issue or pull request (adding a label it has changes nothing)."""
    with _github(call, args.repo) as client:
        labels = client.add_labels(args.repo, args.number, args.labels, deadline=call.deadline)
    return StepOutcome(
        StepStatus.SUCCEEDED,
        output=f"labelled {args.repo}#{args.number}: {', '.join(args.labels)}",
        result={"repo": args.repo, "number": args.number, "labels": labels},
    )


def _github(call: Call, repo: str) -> GithubClient:
    settings = call.context.settings
    if settings.github.token is None:
        raise AdeError(
            f"ADE_GITHUB__TOKEN is not set on this worker, so nothing was sent to {repo}; "
            "set it to a token that may write to the repository's issues and pull requests"
        )
    return GithubClient.from_settings(settings.github, policy=HTTP_POLICY)


def notify_send(args: NotifySendArgs, call: Call) -> StepOutcome:
    """Post a message to a Slack-compatible webhook, once per run and step."""
    context = call.context
    with call.session() as session:
        sent = session.scalar(
            select(RunEventRow.id)
            .where(RunEventRow.run_id == context.run_id, RunEventRow.kind == NOTIFY_SENT)
            .where(RunEventRow.step_index == context.step_index)
            .limit(1)
        )
    if sent is not None:
        return StepOutcome(
            StepStatus.SUCCEEDED,
            output="the notification was already sent by this step of this run; not sent again",
            result={"sent": False, "already_sent": True},
        )
    send_notification(
        args.url, args.text, marker=call.marker, policy=HTTP_POLICY, deadline=call.deadline
    )
    with call.session() as session:
        run_events_db.append_event(
            session, context.run_id, NOTIFY_SENT, {"marker": call.marker}, context.step_index
        )
    return StepOutcome(
        StepStatus.SUCCEEDED,
        output=f"notification sent ({len(args.text)} characters)",
        result={"sent": True},
    )


#: Action name -> the function that carries it out (one per entry of the catalog).
HANDLERS: dict[str, Callable[[Any, Call], StepOutcome]] = {
    "runs.cancel": runs_cancel,
    "rules.enable": rules_enable,
    "rules.disable": rules_disable,
    "lanes.list": lanes_list,
    "github.comment": github_comment,
    "github.add_labels": github_add_labels,
    "notify.send": notify_send,
    "cleanups.list": cleanups_list,
    "cleanups.cancel": cleanups_cancel,
}
