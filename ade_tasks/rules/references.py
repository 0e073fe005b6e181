"""The trigger fields a rule's templates may name: what its trigger types provide.

`{{trigger.*}}` in a step's fields, condition, prompt or thread, an agent execution's prompt or
thread, `concurrency.key` and `outputs.pr_title` is checked at load (`rules validate`, sync)
against the union of the fields the rule's trigger types give a run, so `trigger.inputs.nmber`
or `trigger.titel` is refused with the field, the reference and what exists, instead of failing
the first run. (Step and rule references are checked by `ade_tasks.templating.check_name`.)

Only what is knowable is checked. A field whose value is open-ended (a custom webhook's `body`,
a GitHub event's `data`, a local event's `fields`, a finished run's `outputs`, a merged lane's
`pull_request`) or not a mapping (`trigger.labels.0`) is checked at its own level and no deeper;
a rule that declares no inputs takes any `trigger.inputs.<name>`; a trigger type this table
does not know makes every trigger reference pass. A field one of the rule's trigger types gives
is accepted although another lacks it (that trigger's runs fail at the reference, as documented).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ade_tasks.rules.triggers import TriggerType, canonical_trigger_type
from ade_tasks.templating import TriggerFields

T = TriggerType
#: A run's trigger, whatever started it: a retry names the run it retries, an admin who forced
#: it past the kill switch is recorded.
COMMON = ("retry_of", "forced_by")
#: A one-shot (`run --at/--in`) adds the scheduled run and its time.
ONE_SHOT = ("scheduled_run", "run_at")
#: `ade_tasks.ingress.event.NormalizedEvent`'s fields (a unit test keeps them equal).
EVENT = (
    "source", "delivery_id", "event_key", "trigger_type", "repo", "branch", "base", "number",
    "title", "body", "author", "author_association", "labels", "draft", "merged", "head_sha",
    "url", "paths", "summary", "event", "action", "label", "sender", "by_engine", "data",
)  # fmt: skip
#: `ade_tasks.db.lanes.LaneRef.to_dict`'s keys.
LANE = ("id", "name", "branch", "path", "base_ref", "base_sha")
#: `ade_tasks.triggers.run_finished.finished_event`'s facts about the finished run.
RUN = (
    "id", "rule", "status", "queue_status", "error", "trigger_type", "finished_at", "summary",
    "outputs", "findings",
)  # fmt: skip


def _open(*names: str) -> dict[str, TriggerFields | None]:
    return dict.fromkeys(names)


_LANE_EVENT: TriggerFields = {
    **_open("event", "project", "source_run", "pull_request"),
    "lane": _open(*LANE),
}
_LOCAL_EVENT: TriggerFields = _open(*EVENT, "fields")  # git and file events may carry `fields`
#: What each trigger type gives a run's `{{trigger.*}}` (besides COMMON; manual runs' `inputs`
#: come from the rule).
PROVIDED: dict[str, TriggerFields] = {
    T.MANUAL: _open("inputs", "requested_by", *ONE_SHOT),
    T.SCHEDULE: _open("trigger_index", "cron", "slot", "once", "backfill_by", *ONE_SHOT),
    T.WEBHOOK: _open("hook", "delivery_id", "body"),
    **{kind: _open(*EVENT) for kind in T if kind.startswith("github.")},
    T.GIT_PUSH: _LOCAL_EVENT,
    T.GIT_COMMIT: _LOCAL_EVENT,
    T.FILE_CHANGED: _LOCAL_EVENT,
    T.LANE_CREATED: _LANE_EVENT,
    T.LANE_DELETED: _LANE_EVENT,
    T.LANE_MERGED: _LANE_EVENT,
    T.RUN_FINISHED: {**_open("event", "depth"), "run": _open(*RUN)},
}


def trigger_fields(document: Mapping[str, Any]) -> TriggerFields | None:
    """The fields a rule document's triggers give its runs; None when they cannot be known
    (triggers missing or malformed, or a type this table does not know)."""
    triggers = document.get("triggers")
    if not isinstance(triggers, list) or not triggers:
        return None
    merged: dict[str, TriggerFields | None] = _open(*COMMON)
    for trigger in triggers:
        kind = trigger.get("type") if isinstance(trigger, Mapping) else None
        provided = PROVIDED.get(canonical_trigger_type(kind)) if isinstance(kind, str) else None
        if provided is None:
            return None
        merged = _merge(merged, provided)
    if "inputs" in merged:
        merged["inputs"] = _declared_inputs(document.get("inputs"))
    return merged


def _declared_inputs(inputs: Any) -> TriggerFields | None:
    # A rule that declares no inputs takes any (`ade_tasks.rules.inputs.resolve_inputs`).
    if isinstance(inputs, Mapping) and inputs:
        return _open(*map(str, inputs))
    return None


def _merge(
    left: Mapping[str, TriggerFields | None], right: Mapping[str, TriggerFields | None]
) -> dict[str, TriggerFields | None]:
    merged = dict(left)
    for name, below in right.items():
        if name not in merged:
            merged[name] = below
        else:
            mine = merged[name]
            # Open-ended on either side stays open-ended: nothing below it is checked.
            merged[name] = None if mine is None or below is None else _merge(mine, below)
    return merged
