"""Lane triggers: a lane created or deleted by a run (`lane.created` / `lane.deleted`), or its
branch merged (`lane.merged`: a merged GitHub pull request from the lane's branch).

A lane event's payload names the lane (`LaneRef.to_dict`) and its project; a lane trigger
starts on the lanes of its own rule's project whose names its `lanes` globs accept (none given:
every lane).
"""

from __future__ import annotations

from collections.abc import Mapping
from fnmatch import fnmatchcase

from ade_tasks.db import lanes as lanes_db
from ade_tasks.db.engine import SessionFactory
from ade_tasks.ingress.event import EventSource
from ade_tasks.rules.rule import Rule
from ade_tasks.rules.triggers import LaneTrigger, Trigger, TriggerType
from ade_tasks.runs.trigger_events import TriggerEvent
from ade_tasks.triggers.matcher import Refusal, TriggerTest

SOURCE: EventSource = "lane"
MERGED = TriggerType.LANE_MERGED.value


def lane_matcher(_source: str, payload: Mapping[str, object], /) -> TriggerTest:
    """Lane triggers against a lane event's payload (`lane_event`, `merged_lane_events`)."""
    lane = payload["lane"]
    assert isinstance(lane, Mapping), "a lane event's payload holds its lane (LaneRef.to_dict)"
    name, project = str(lane["name"]), str(payload["project"])

    def match(rule: Rule, trigger: Trigger) -> Refusal | None:
        assert isinstance(trigger, LaneTrigger)
        if rule.project != project:
            return Refusal("project", f"the lane is in project {project}, not {rule.project}")
        if not trigger.lanes or any(fnmatchcase(name, glob) for glob in trigger.lanes):
            return None
        return Refusal("lanes", f"lane {name} matches none of {', '.join(trigger.lanes)}")

    return match


def lane_event(kind: str, lane: Mapping[str, object], project: str, run_id: str) -> TriggerEvent:
    """`lane.created` / `lane.deleted` for a lane of `project`, emitted by run `run_id`."""
    return TriggerEvent(
        kind,
        f"{kind} {lane['name']!r} by run {run_id}",
        {"event": kind, "lane": dict(lane), "project": project, "source_run": run_id},
        f"{kind}:{lane['id'] or lane['path']}",
    )


def merged_lane_events(
    session_factory: SessionFactory, payload: Mapping[str, object]
) -> list[tuple[str, TriggerEvent]]:
    """A merged pull request (a `github.pr_merged` payload) from a lane's branch is that lane's
    `lane.merged` event, keyed by the pull request so it fires once however often the delivery
    is seen: (source, event) for each lane on the branch."""
    branch, repo, number = payload.get("branch"), payload.get("repo"), payload.get("number")
    if not branch:
        return []
    with session_factory() as session:
        lanes = lanes_db.lanes_on_branch(session, str(branch))
        found = [(row.project, lanes_db.lane_ref(row).to_dict()) for row in lanes]
    return [
        (
            SOURCE,
            TriggerEvent(
                MERGED,
                f"lane {lane['name']!r} merged by {repo}#{number}",
                {"event": MERGED, "lane": lane, "project": project, "pull_request": dict(payload)},
                f"{MERGED}:{repo}#{number}:{lane['id']}",
            ),
        )
        for project, lane in found
    ]
