"""A rule's schedule: the next fire times of its schedule triggers and its past occurrences."""

from __future__ import annotations

import logging
from typing import Annotated
from zoneinfo import ZoneInfo

from fastapi import APIRouter, Query

from ade_api.http.deps import SessionDep
from ade_api.http.health_state import pause_out
from ade_api.http.routes.rules import NOT_FOUND
from ade_api.http.schemas.params import Instant
from ade_api.http.schemas.problem import problem_responses
from ade_api.http.schemas.schedules import FireTime, OccurrenceOut, RuleSchedule, TriggerSchedule
from ade_tasks.clock import utcnow
from ade_tasks.db import occurrences as occ_db
from ade_tasks.db import pauses as pauses_db
from ade_tasks.db import rules as rules_db
from ade_tasks.errors import InvalidInputError
from ade_tasks.rules.schedules import rule_schedules

log = logging.getLogger(__name__)
router = APIRouter(prefix="/api/v1/rules", tags=["rules"])


@router.get(
    "/{rule_id}/schedule",
    responses={**NOT_FOUND, **problem_responses({422: "`from` without Z or an offset"})},
)
def schedule_preview(
    rule_id: str,
    session: SessionDep,
    count: Annotated[int, Query(ge=1, le=100)] = 10,
    start: Annotated[
        Instant | None,
        Query(alias="from", description="list fire times after this time (Z or an offset)"),
    ] = None,
) -> RuleSchedule:
    """The next fire times of the rule's schedule triggers (after `from`, default now), in UTC
    and in each trigger's zone, each with how a daylight-saving change moved or doubled it.

    A trigger that cannot fire (a cron that never fires or whose meaning changed since it was
    stored, a time zone unknown here) has its `problem` and no times; a stored document that
    cannot be read is the rule's `problems`. One such rule is answered 200 with its problems,
    never an error. A paused trigger (or every one of a paused rule) names its pause in
    `paused`: its times are skipped until resumed. A `from` without a zone is refused (422)."""
    if start is not None and start.tzinfo is None:
        raise InvalidInputError(
            f"from={start.isoformat()} has no time zone; write it with Z or an offset, e.g. "
            f"{start.isoformat()}Z"
        )
    row = rules_db.get_rule(session, rule_id)
    pauses = pauses_db.pauses_of(session, [rule_id]).get(rule_id, [])
    paused = [pause_out(found) for found in pauses]
    try:
        rule = rules_db.load_rule(row)
    except Exception as exc:
        log.exception("rule %s: the stored document cannot be read", rule_id)
        problem = f"its stored document cannot be read ({type(exc).__name__}: {exc})"
        return RuleSchedule(
            rule_id=rule_id, enabled=row.enabled, triggers=[], problems=[problem], pauses=paused
        )
    triggers = []
    for found in rule_schedules(rule, start or utcnow(), count):
        zone = ZoneInfo(found.trigger.timezone) if found.times else None
        triggers.append(
            TriggerSchedule(
                trigger_index=found.index,
                cron=found.trigger.cron or "",
                timezone=found.trigger.timezone,
                next=[
                    FireTime(utc=t, local=t.astimezone(zone), dst=note)
                    for t, note in zip(found.times, found.dst, strict=True)
                ],
                problem=found.problem,
                paused=held.reason if (held := pauses_db.holding(pauses, [found.index])) else None,
            )
        )
    problems = [t.problem for t in triggers if t.problem]
    return RuleSchedule(
        rule_id=rule_id, enabled=row.enabled, triggers=triggers, problems=problems, pauses=paused
    )


@router.get("/{rule_id}/occurrences", responses=NOT_FOUND)
def occurrences(
    rule_id: str, session: SessionDep, limit: Annotated[int, Query(ge=1, le=500)] = 100
) -> list[OccurrenceOut]:
    """Past schedule occurrences of the rule, newest first: fired (with the run), skipped (with
    the reason) or missed. Answers "did the 03:00 run happen, and if not, why?"."""
    rules_db.get_rule(session, rule_id)
    rows = occ_db.list_for_rule(session, rule_id, limit)
    return [OccurrenceOut.model_validate(row) for row in rows]
