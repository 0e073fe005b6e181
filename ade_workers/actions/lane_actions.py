"""Lane actions: `create-lane`, `delete-lane` (now or deferred) and `predict-conflicts`.

A lane is a git worktree on its own branch under `<lanes root>/<project>/`; the lane a run
creates is threaded into its later steps (they run in its worktree). `delete-lane` targets the
lane named in `target`, else the lane of this run or of its trigger, and fails rather than
guess when there is none; with `after_minutes` it records a scheduled cleanup that the 60 s
sweep carries out (see `ade_workers.engine.cleanups`).
"""

from __future__ import annotations

from datetime import timedelta

from ade_tasks.clock import utcnow
from ade_tasks.db import lanes as lanes_db
from ade_tasks.db import run_events as run_events_db
from ade_tasks.db.lanes import LaneRef
from ade_tasks.errors import AdeError
from ade_tasks.json_document import JsonObject
from ade_tasks.rules.steps import CreateLaneAction, DeleteLaneAction, PredictConflictsAction
from ade_tasks.states import StepStatus
from ade_tasks.triggers.local_events import emit_lane_event
from ade_workers.actions.executor import StepContext, StepOutcome
from ade_workers.integrations import git_lanes as lanes


def create_lane(action: CreateLaneAction, context: StepContext) -> StepOutcome:
    """Add a worktree on a new branch from `base`; record the lane and its `lane.created` event."""
    allowed = context.rule.guardrails.allowed_lanes
    if allowed and not lanes.name_allowed(action.name, allowed):
        return _refused(action.id, action.name, allowed)
    try:
        repo = lanes.require_repository(context.project_root)
        created = lanes.create_lane(
            repo,
            context.settings.lanes_dir(context.rule.project),
            action.name,
            action.base,
            action.branch_prefix,
        )
    except AdeError as exc:
        return StepOutcome(StepStatus.FAILED, error=f"step {action.id!r}: {exc.message}")
    lane = LaneRef("", created.name, created.branch, created.path, created.base_ref,
                   created.base_sha)  # fmt: skip
    with context.sessions.begin() as session:
        lane = lanes_db.record_lane(session, context.rule.project, lane, context.run_id)
        run_events_db.append_event(
            session, context.run_id, "lane.created", lane.to_dict(), context.step_index
        )
    triggered = _emit(context, "lane.created", lane.to_dict())
    output = (
        f"created lane {lane.name!r} on branch {lane.branch} at {lane.path} "
        f"from {lane.base_ref} ({lane.base_sha[:12]})"
    )
    result = {"lane": lane.to_dict(), "triggered_runs": triggered}
    return StepOutcome(StepStatus.SUCCEEDED, output=output, result=result)


def delete_lane(action: DeleteLaneAction, context: StepContext) -> StepOutcome:
    """Delete the target lane now, or schedule its deletion `after_minutes` from now."""
    try:
        lane = _target(action.id, action.target, context)
    except AdeError as exc:
        return StepOutcome(StepStatus.FAILED, error=exc.message)
    if action.after_minutes > 0:
        due = utcnow() + timedelta(minutes=action.after_minutes)
        with context.sessions.begin() as session:
            cleanup_id = lanes_db.schedule_cleanup(
                session,
                run_id=context.run_id,
                step_id=action.id,
                lane_id=lane.id,
                due_at=due,
                force=action.force,
                delete_remote=action.remote,
                delete_branch=action.delete_branch,
            )
        result = {
            "lane": lane.to_dict(),
            "scheduled_cleanup": cleanup_id,
            "due_at": due.isoformat(),
        }
        output = f"scheduled: lane {lane.name!r} will be deleted at {due:%Y-%m-%d %H:%M} UTC"
        return StepOutcome(StepStatus.SUCCEEDED, output=output, result=result)
    try:
        deleted = remove_lane(
            context,
            lane,
            force=action.force,
            remote=action.remote,
            delete_branch=action.delete_branch,
        )
    except AdeError as exc:
        return StepOutcome(StepStatus.FAILED, error=f"step {action.id!r}: {exc.message}")
    triggered = _emit(context, "lane.deleted", lane.to_dict())
    result = {"lane": {**lane.to_dict(), "deleted": True}, "note": deleted.note}
    return StepOutcome(
        StepStatus.SUCCEEDED,
        output=f"lane {lane.name!r}: {deleted.note}",
        result={**result, "triggered_runs": triggered},
    )


def remove_lane(
    context: StepContext,
    lane: LaneRef,
    *,
    force: bool,
    remote: str | None,
    delete_branch: bool = True,
) -> lanes.DeleteResult:
    """Delete the worktree and branch (a lane already gone is a no-op) and mark the row."""
    repo = lanes.require_repository(context.project_root)
    deleted = lanes.delete_lane(
        repo, lane.path, lane.branch, force=force, remote=remote, delete_branch=delete_branch
    )
    if lane.id:
        with context.sessions.begin() as session:
            lanes_db.mark_deleted(session, lane.id)
    return deleted


def predict_conflicts(action: PredictConflictsAction, context: StepContext) -> StepOutcome:
    """Which files would conflict if the lane's branch merged into its base (as findings)."""
    try:
        lane = _target(action.id, action.target, context)
        base = action.base or lane.base_ref or lane.base_sha
        repo = lanes.require_repository(context.project_root)
        files = lanes.predict_conflicts(repo, lane.branch, base)
    except AdeError as exc:
        return StepOutcome(StepStatus.FAILED, error=f"step {action.id!r}: {exc.message}")
    findings = [
        {
            "severity": "warning",
            "kind": "merge-conflict",
            "path": path,
            "message": f"{path} would conflict when {lane.branch} merges into {base}",
        }
        for path in files
    ]
    output = (
        f"{len(files)} file(s) would conflict merging {lane.branch} into {base}: "
        + ", ".join(files)
        if files
        else f"{lane.branch} merges cleanly into {base}"
    )
    result: JsonObject = {"conflicts": files, "base": base, "findings": findings}
    return StepOutcome(StepStatus.SUCCEEDED, output=output, result=result)


def _emit(context: StepContext, kind: str, lane: JsonObject) -> list[str]:
    """Start the runs of rules triggered by this lane event; their ids."""
    if context.sender is None:
        return []
    disabled = context.settings.disable_automations
    return emit_lane_event(context.sessions, context.sender, kind, lane, context.rule.project,
                           context.run_id, automations_disabled=disabled)  # fmt: skip


def _target(step_id: str, name: str | None, context: StepContext) -> LaneRef:
    """The named lane, else the run's or the trigger's lane; an error rather than a guess."""
    if name:
        with context.sessions.begin() as session:
            row = lanes_db.active_lane(session, context.rule.project, name)
        if row is None:
            raise AdeError(
                f"step {step_id!r}: lane {name!r} does not exist in project "
                f"{context.rule.project!r} (or was deleted)"
            )
        allowed = context.rule.guardrails.allowed_lanes
        if allowed and not lanes.name_allowed(row.name, allowed):
            raise AdeError(_refused(step_id, row.name, allowed).error or "")
        return lanes_db.lane_ref(row)
    if context.lane is None:
        raise AdeError(
            f"step {step_id!r} has no lane to act on: this run created none and its trigger "
            "names none; set `target:` to a lane name or add a create-lane step before it"
        )
    return context.lane


def _refused(step_id: str, name: str, allowed: list[str]) -> StepOutcome:
    return StepOutcome(
        StepStatus.FAILED,
        error=(
            f"step {step_id!r}: lane {name!r} is not allowed by the rule's allowed_lanes "
            f"({', '.join(allowed)})"
        ),
    )
