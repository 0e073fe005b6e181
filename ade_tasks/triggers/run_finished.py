"""Run triggers: one rule's run finishing starts the rules that follow it (`run.finished`):
the matcher, the event and its chain depth. Where the event is emitted (the runner, and a sweep
that sees every finish): `ade_tasks.triggers.finished_runs`.

**The event.** A run that reaches a final status (`ade_tasks.states.FINAL_STATUSES`) is the
event `run.finished`, keyed `run.finished:<run id>`; each following rule's run gets
`run.finished:<run id>:<rule id>` (`local_events.emit`), so however often the finish is seen,
each rule starts once. The payload (the following run's `trigger.*`):

    {"event": "run.finished", "depth": 1,
     "run": {"id", "rule", "status", "queue_status", "error", "trigger_type",
             "finished_at", "summary", "findings": <count>,
             "outputs": {<step id>: {"status", "exit_code", "output", "result"}}}}

`summary` is the output of the run's `publish` step when it has one (the text its disposition
published), else a few lines of the same shape: outcome, each step's status, the error.
`outputs` mirrors `{{steps.<id>.*}}` of the finished run, each output cut to its last
`OUTPUT_CHARS` characters and a result longer than `RESULT_CHARS` as JSON left out (the run
page has it whole).

**Loops.** A rule cannot follow itself (refused at validation, `Rule`); a longer loop (A -> B ->
A) is bounded by the chain depth: the event of a run not started by `run.finished` has depth 1,
the event of a run started by one has that event's depth + 1. An event deeper than
`MAX_CHAIN_DEPTH` starts nothing (`finished_runs` logs it and records it in the finished run's
transcript), so a run not started by `run.finished` is followed by at most `MAX_CHAIN_DEPTH`
runs in a row.

**Matching.** A `run.finished` trigger starts when one of its `rule` globs (fnmatch, as lane
globs) accepts the finished run's rule id and its `status` names the run's status or the
review-queue status it finished in; without `status`, every outcome but `skipped` (a run
skipped at admission never ran; name `skipped` to follow those too).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ade_tasks.db.schema import RunRow, RunStepRow
from ade_tasks.json_document import JsonObject
from ade_tasks.rules.rule import Rule
from ade_tasks.rules.triggers import RunFinishedTrigger, Trigger, TriggerType
from ade_tasks.runs.trigger_events import TriggerEvent
from ade_tasks.states import RunStatus
from ade_tasks.triggers.matcher import Refusal, TriggerTest

SOURCE = "run"
RUN_FINISHED = TriggerType.RUN_FINISHED.value
#: How many runs may follow one another through run.finished triggers (see the docstring).
MAX_CHAIN_DEPTH = 5
OUTPUT_CHARS = 2000
RESULT_CHARS = 4000


# --- matching -------------------------------------------------------------------------------


def starts_on(trigger: RunFinishedTrigger, run: Mapping[str, object]) -> bool:
    """Does `trigger` start on the finish of `run` (the payload's `run`)?"""
    return refusal(trigger, run) is None


def refusal(trigger: RunFinishedTrigger, run: Mapping[str, object]) -> Refusal | None:
    """Which filter of `trigger` refuses the finish of `run`, with what it saw; None if it
    starts."""
    rule, status, queue_status = run.get("rule"), run.get("status"), run.get("queue_status")
    if not trigger.follows(str(rule)):
        return Refusal("rule", f"run of rule {rule} matches none of {', '.join(trigger.rule)}")
    if not trigger.status:
        if status == RunStatus.SKIPPED:
            return Refusal("status", "the run was skipped (name skipped in status to follow it)")
        return None
    if status in trigger.status or queue_status in trigger.status:
        return None
    return Refusal(
        "status", f"run {status} ({queue_status}) is none of {', '.join(trigger.status)}"
    )


def follow_key(run_id: str, rule_id: str) -> str:
    """The idempotency key of rule `rule_id`'s run that follows run `run_id`."""
    return f"{RUN_FINISHED}:{run_id}:{rule_id}"


def followed_keys(_source: str, payload: Mapping[str, object], /) -> tuple[str, ...]:
    """The rule whose run finished: the rules following it by name, or by a glob, may start."""
    run = payload.get("run")
    rule = run.get("rule") if isinstance(run, Mapping) else None
    return (rule,) if isinstance(rule, str) else ()


def run_finished_matcher(_source: str, payload: Mapping[str, object], /) -> TriggerTest:
    """Run triggers against a `run.finished` payload (`finished_event`)."""
    run = payload["run"]
    assert isinstance(run, Mapping), "a run.finished payload holds the finished run"

    def match(_rule: Rule, trigger: Trigger) -> Refusal | None:
        assert isinstance(trigger, RunFinishedTrigger)
        return refusal(trigger, run)

    return match


# --- the event --------------------------------------------------------------------------------


def chain_depth(run: RunRow) -> int:
    """The depth of `run`'s finish: 1, or one more than the run.finished event that started it."""
    if run.trigger_type != RUN_FINISHED:
        return 1
    depth = (run.trigger or {}).get("depth")
    return (depth if isinstance(depth, int) and depth > 0 else 1) + 1


def finished_event(run: RunRow, steps: Sequence[RunStepRow]) -> TriggerEvent:
    """The `run.finished` event of a finished run (its payload: the module docstring)."""
    outputs = {step.step_id: _step_output(step) for step in steps}
    finished_at = run.finished_at.isoformat() if run.finished_at else None
    facts: JsonObject = {
        "id": run.id,
        "rule": run.rule_id,
        "status": run.status,
        "queue_status": run.queue_status,
        "error": run.error,
        "trigger_type": run.trigger_type,
        "finished_at": finished_at,
        "summary": _summary(run, steps),
        "outputs": outputs,
        "findings": len(run.findings or []),
    }
    payload = {"event": RUN_FINISHED, "depth": chain_depth(run), "run": facts}
    return TriggerEvent(
        RUN_FINISHED,
        f"run {run.id} of rule {run.rule_id!r} {run.status}",
        payload,
        f"{RUN_FINISHED}:{run.id}",
    )


def _step_output(step: RunStepRow) -> JsonObject:
    result: Any = step.result or {}
    shown = json.dumps(result, default=str)
    if len(shown) > RESULT_CHARS:
        result = {"omitted": f"{len(shown)} characters of JSON; see the run's step"}
    return {
        "status": step.status,
        "exit_code": step.exit_code,
        "output": (step.output or "")[-OUTPUT_CHARS:],
        "result": result,
    }


def _summary(run: RunRow, steps: Sequence[RunStepRow]) -> str:
    published = [step.output for step in steps if step.step_id == "publish" and step.output]
    if published:
        return published[-1][-OUTPUT_CHARS:]
    lines = [f"rule {run.rule_id} · run {run.id}: {run.status}"]
    lines += [f"- {step.step_id}: {step.status}" for step in steps]
    if run.error:
        lines.append(f"error: {run.error[:OUTPUT_CHARS]}")
    return "\n".join(lines)
