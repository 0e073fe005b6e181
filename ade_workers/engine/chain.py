"""The semantics of a built-in rule's chain of steps, apart from claiming and recording runs.

For each step, in order: skip it after an earlier failure unless it is `always_run`; evaluate
its `condition` (false: skipped); resolve its `${env:NAME}` secrets (their values are masked in
everything the step reports), then render its `{{...}}` templates; pick where it runs (its
`lane`, the run's lane, or the project root); run it, retrying a failure up to `retry` times
with exponential backoff; then hold the lane to the rule's `allowed_paths`.

A failure that is not `continue_on_failure` decides the run's outcome; later `always_run` steps
still run and never change it.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from ade_tasks.clock import utcnow
from ade_tasks.db.lanes import LaneRef
from ade_tasks.errors import AdeError
from ade_tasks.json_document import JsonObject
from ade_tasks.paths import resolve_inside
from ade_tasks.retry import RetryPolicy
from ade_tasks.rules.conditions import ConditionError, parse_condition
from ade_tasks.rules.rule import Rule
from ade_tasks.rules.steps import Action
from ade_tasks.secrets import Masker, SecretError, resolve, seal, unseal, unsealable
from ade_tasks.states import RunStatus, StepStatus
from ade_tasks.templating import TemplateContext, TemplateError, render_value
from ade_workers.actions.executor import StepContext, StepOutcome

#: Lane values of a step's `lane` field that are not lane names.
RUN_LANE, PROJECT_ROOT = "created", "project"


@dataclass
class ChainState:
    """What the chain knows so far: each step's report, the run's lane, its first failure."""

    steps: dict[str, JsonObject] = field(default_factory=dict)
    lane: LaneRef | None = None
    failure: tuple[RunStatus, str] | None = None
    findings: list[JsonObject] = field(default_factory=list)
    ran: int = 0
    masker: Masker = field(default_factory=Masker.none)

    def remember(self, step_id: str, outcome: StepOutcome) -> None:
        """Make a finished step visible to later templates and conditions."""
        self.steps[step_id] = {
            "output": outcome.output,
            "status": outcome.status.value,
            "exit_code": outcome.exit_code,
            "result": outcome.result,
        }
        if outcome.status is not StepStatus.SKIPPED:
            # An agent step's model turns each brought context in, like a step does.
            self.ran += max(1, int(outcome.result.get("turns") or 0))
        self.findings.extend(outcome.result.get("findings") or [])
        lane = outcome.result.get("lane")
        if isinstance(lane, dict) and "path" in lane:
            self.lane = None if lane.get("deleted") else LaneRef.from_dict(lane)


@dataclass(frozen=True)
class StepRun:
    """The environment one step of one run executes in, built by the runner."""

    base: StepContext
    rule: Rule
    trigger: Mapping[str, object]
    find_lane: Callable[[str], LaneRef | None]
    sleep: Callable[[float], None] = time.sleep


def template_context(
    rule: Rule, trigger: Mapping[str, object], state: ChainState
) -> TemplateContext:
    """What `{{...}}` may refer to at this point of the chain."""
    rule_fields = {
        "id": rule.id,
        "name": rule.name,
        "description": rule.description,
        "project": rule.project,
        "billing_code": rule.billing_code,
    }
    return TemplateContext(trigger=trigger, steps=state.steps, rule=rule_fields, now=utcnow())


def run_step(
    action: Action,
    index: int,
    state: ChainState,
    step_run: StepRun,
    execute: Callable[[Action, StepContext], StepOutcome],
) -> StepOutcome:
    """Run one step under the chain's semantics; never raises for a step's own failure."""
    where = f"step {action.id!r} (#{index + 1})"
    if state.failure is not None and not action.always_run:
        return StepOutcome(StepStatus.SKIPPED, result={"skipped": "an earlier step failed"})
    context = template_context(step_run.rule, step_run.trigger, state)
    try:
        if action.condition and not parse_condition(action.condition, where).evaluate(context):
            return StepOutcome(StepStatus.SKIPPED, result={"skipped": "condition is false"})
        prepared, masker = prepare(action, context, step_run.base.base_env, where)
        cwd_root, lane = _where_it_runs(action, state, step_run)
    except (ConditionError, TemplateError, SecretError, AdeError) as exc:
        return StepOutcome(StepStatus.FAILED, error=state.masker.mask(exc.message))
    state.masker = state.masker.merge(masker)
    step_context = replace(
        step_run.base, step_index=index, step_id=action.id, cwd_root=cwd_root, lane=lane,
        masker=state.masker, template=context,
    )  # fmt: skip
    policy = RetryPolicy(attempts=action.retry)
    attempt = 0
    while True:
        outcome = execute(prepared, step_context)
        if outcome.status is not StepStatus.FAILED or attempt >= policy.attempts:
            break
        attempt += 1
        delay = policy.delay_for(attempt)
        if step_context.should_stop() or delay >= step_context.time_left():
            break
        step_run.sleep(delay)
    if attempt:
        outcome = replace(outcome, result={**outcome.result, "attempts": attempt + 1})
    outcome = _masked(outcome, state.masker)
    return _check_allowed_paths(outcome, step_run.rule, state, lane, where)


def prepare(
    action: Action, context: TemplateContext, env: Mapping[str, str], where: str
) -> tuple[Action, Masker]:
    """The action with its templates rendered and its secrets resolved.

    Secret references are sealed while templates render, so a trigger field that holds
    `${env:...}` is never resolved and a secret whose value looks like `{{...}}` is never
    rendered; template values inserted into a shell command string are shell-quoted, so a PR
    title can never inject shell syntax.
    """
    raw = {name: getattr(action, name) for name in action.templated}
    _, masker = resolve(raw, env, where)  # every referenced secret must be set
    sealed, seals = seal(raw)
    rendered = {}
    for name, value in sealed.items():
        quote = name == "command" and isinstance(value, str)
        escape = _quoted if quote else unsealable
        rendered[name] = render_value(value, context, f"{where} {name}", escape=escape)
    return action.model_copy(update=unseal(rendered, seals, env)), masker


def _quoted(value: str) -> str:
    return shlex.quote(unsealable(value))


def _where_it_runs(
    action: Action, state: ChainState, step_run: StepRun
) -> tuple[Path, LaneRef | None]:
    """The directory the step runs in and the lane it targets (None: the project root)."""
    wanted = action.lane
    lane: LaneRef | None
    if wanted == PROJECT_ROOT:
        lane = None
    elif wanted == RUN_LANE:
        lane = state.lane
        if lane is None:
            raise AdeError(
                f"step {action.id!r} runs in the lane created in this run, but no earlier "
                "step created one; add a create-lane step before it"
            )
    elif wanted:
        lane = step_run.find_lane(wanted)
        if lane is None:
            raise AdeError(
                f"step {action.id!r} names lane {wanted!r}, which does not exist in project "
                f"{step_run.rule.project!r}; list lanes with `ade-tasks lanes list`"
            )
    else:
        lane = state.lane or _trigger_lane(step_run)
    allowed = step_run.rule.guardrails.allowed_lanes
    # Every step that runs in a lane this run did not create is held to allowed_lanes;
    # create-lane checks the name of the lane it creates itself.
    created_here = lane is not None and lane is state.lane
    if lane is not None and allowed and action.type != "create-lane" and not created_here:
        from ade_workers.integrations.git_lanes import name_allowed

        if not name_allowed(lane.name, allowed):
            raise AdeError(
                f"step {action.id!r} targets lane {lane.name!r}, which the rule's "
                f"allowed_lanes ({', '.join(allowed)}) does not allow"
            )
    return (lane.path if lane else step_run.base.project_root), lane


def _trigger_lane(step_run: StepRun) -> LaneRef | None:
    """The lane a `lane.created` trigger names, if its worktree lies inside the project's lanes
    directory: a trigger's payload never sends a step elsewhere. (A `lane.deleted` lane is
    gone: steps of such runs start in the project root.)"""
    if step_run.trigger.get("event") == "lane.deleted":
        return None
    lane = LaneRef.from_trigger(step_run.trigger)
    settings = step_run.base.settings
    if lane is None or settings is None:
        return lane
    lanes_dir = settings.lanes_dir(step_run.rule.project)
    inside = resolve_inside(lanes_dir, str(lane.path), what="the trigger's lane path")
    return replace(lane, path=inside)


def _masked(outcome: StepOutcome, masker: Masker) -> StepOutcome:
    return replace(
        outcome,
        output=masker.mask(outcome.output),
        result=masker.mask_value(outcome.result),
        error=masker.mask(outcome.error) if outcome.error else outcome.error,
    )


def _check_allowed_paths(
    outcome: StepOutcome, rule: Rule, state: ChainState, lane: LaneRef | None, where: str
) -> StepOutcome:
    """Fail the step when the lane now holds changes outside the rule's `allowed_paths`."""
    globs = rule.guardrails.allowed_paths
    lane = lane or state.lane
    if not globs or lane is None or not lane.path.is_dir():
        return outcome
    from ade_workers.integrations.git_lanes import changed_paths, paths_outside

    outside = paths_outside(changed_paths(lane.path, base=lane.base_sha), globs)
    if not outside:
        return outcome
    shown = ", ".join(outside[:20]) + (
        f" and {len(outside) - 20} more" if len(outside) > 20 else ""
    )
    finding = {
        "severity": "error",
        "kind": "path-violation",
        "message": f"changed outside allowed_paths: {shown}",
    }
    return replace(
        outcome,
        status=StepStatus.FAILED,
        result={**outcome.result, "findings": [*outcome.result.get("findings", []), finding]},
        error=(
            f"{where} changed files outside the rule's allowed_paths ({', '.join(globs)}): {shown}"
        ),
    )
