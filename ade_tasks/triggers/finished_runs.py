"""Emitting `run.finished` (`ade_tasks.triggers.run_finished`): exactly once per finished
run, wherever it finished.

Runs finish in many places: the runner records an outcome, an operator or `cancel-other`
cancels, an answer declines, the recovery sweep fails a run whose worker was lost too often,
admission records a run `skipped`. What they all share is the run's `finished_at`, so the one
place that sees every finish is a sweep over it: `sweep_finished_runs`, a housekeeping job every
`ADE_RECOVERY_INTERVAL_SECONDS` (`ade_tasks.housekeeping`), reads the runs finished since its
cursor (the ingress cursor `run.finished`, moved to `now - LAG` after each pass, so a finish
whose transaction commits late is still seen: the rollups' assumption, `run_rollups.LAG`; at
most `CATCH_UP` back) and emits each one that a following rule has not started yet. The runner
also emits right after it records an outcome (`emit_after_finish`), so the common path does not
wait for the sweep; a worker killed between the two, or a finish the runner did not make, is the
sweep's. Both go through `local_events.emit` with the same key, so each following rule starts
once however often the finish is emitted (a retried finish, a redelivered message, the sweep
passing it twice).

The status is the one the run has when its event is read: the rare succeeded run whose deferred
cleanup fails it later may start the rules following either status. A chain deeper than
`run_finished.MAX_CHAIN_DEPTH` starts nothing: logged, and recorded once in the finished run's
transcript (`run.finished.refused`, with the reason and the rules not started). The kill switch
refuses these events like every automatic trigger (lane events likewise).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from datetime import datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from ade_tasks.db import cursors as cursors_db
from ade_tasks.db import rule_triggers
from ade_tasks.db import run_events as run_events_db
from ade_tasks.db import runs as runs_db
from ade_tasks.db.engine import SessionFactory
from ade_tasks.db.run_rollups import LAG
from ade_tasks.db.run_steps import list_steps
from ade_tasks.db.schema import RunRow
from ade_tasks.errors import AdeError
from ade_tasks.rules.rule import Rule
from ade_tasks.rules.triggers import RunFinishedTrigger
from ade_tasks.runs.dispatch_results import DispatchResult
from ade_tasks.runs.senders import RunSender
from ade_tasks.states import FINAL_STATUSES
from ade_tasks.triggers.local_events import emit, matching_rules
from ade_tasks.triggers.run_finished import (
    MAX_CHAIN_DEPTH,
    RUN_FINISHED,
    SOURCE,
    finished_event,
    follow_key,
    followed_keys,
    run_finished_matcher,
    starts_on,
)

log = logging.getLogger(__name__)

#: The transcript line of a finished run whose followers were not started (chain too deep).
REFUSED = "run.finished.refused"
#: The ingress cursor of the sweep: the `finished_at` from which it reads runs.
CURSOR = "run.finished"
#: How far back the sweep reaches at most (housekeeping that was down longer loses the finishes
#: no runner emitted before then, rather than starting a flood of old follow-ups).
CATCH_UP = timedelta(hours=1)
#: How long a worker trusts its list of the rules that follow others (the sweep reads it anew).
FOLLOWERS_TTL_SECONDS = 5.0


def emit_run_finished(
    session_factory: SessionFactory,
    sender: RunSender,
    run_id: str,
    *,
    automations_disabled: bool = False,
) -> list[str]:
    """Start the rules that follow finished run `run_id` (each once, however often this is
    called): the ids of their runs. Nothing for a run not finished or a chain too deep."""
    with session_factory() as session:
        run = runs_db.get_run(session, run_id)
        if run.status not in FINAL_STATUSES:
            return []
        event = finished_event(run, list_steps(session, run_id))
    match = run_finished_matcher(SOURCE, event.payload)
    depth = int(event.payload["depth"])
    if depth > MAX_CHAIN_DEPTH:
        keys = followed_keys(SOURCE, event.payload)
        followers = matching_rules(session_factory, RUN_FINISHED, match, keys=keys)
        if followers:
            _refuse(session_factory, run, depth, sorted(followers))
        return []
    results = emit(
        session_factory,
        sender,
        event,
        match,
        automations_disabled=automations_disabled,
        source=SOURCE,
    )
    return [result.run.id for _, result in results if isinstance(result, DispatchResult)]


def _refuse(session_factory: SessionFactory, run: RunRow, depth: int, rules: list[str]) -> None:
    reason = (
        f"run {run.id} of rule {run.rule_id!r} is run {depth} of a run.finished chain, past "
        f"the limit of {MAX_CHAIN_DEPTH}, so the rules following it ({', '.join(rules)}) were "
        "not started; a loop of run.finished triggers (A follows B, B follows A) ends here. "
        "Break the loop, or start the next run by hand"
    )
    with session_factory.begin() as session:
        if run_events_db.events_of(session, run.id, REFUSED):
            return
        run_events_db.append_event(session, run.id, REFUSED, {"reason": reason, "rules": rules})
    log.warning("%s", reason)


class _Followers:
    """The run.finished triggers a worker knows of, read at most every FOLLOWERS_TTL_SECONDS
    (and anew for another database), so a finish no rule follows costs the runner nothing."""

    def __init__(self) -> None:
        self._read: tuple[SessionFactory, float] | None = None
        self._triggers: list[RunFinishedTrigger] = []

    def follow(self, session_factory: SessionFactory, rule_id: str) -> bool:
        now = time.monotonic()
        if (
            self._read is None
            or self._read[0] is not session_factory
            or now - self._read[1] >= FOLLOWERS_TTL_SECONDS
        ):
            with session_factory() as session:
                rules = rule_triggers.rules_with_trigger(session, RUN_FINISHED)
            self._triggers, self._read = _triggers_of(rules), (session_factory, now)
        return any(trigger.follows(rule_id) for trigger in self._triggers)


_FOLLOWERS = _Followers()


def emit_after_finish(
    session_factory: SessionFactory,
    sender: RunSender,
    run_id: str,
    rule_id: str,
    *,
    automations_disabled: bool = False,
) -> list[str]:
    """The runner's fast path, right after it recorded run `run_id`'s outcome: emit its finish
    if a rule follows `rule_id`. Never raises: what fails here the sweep emits later."""
    try:
        if not _FOLLOWERS.follow(session_factory, rule_id):
            return []
        return emit_run_finished(
            session_factory, sender, run_id, automations_disabled=automations_disabled
        )
    except Exception as exc:
        log.warning("run %s: its run.finished event is left for the sweep: %r", run_id, exc)
        return []


def _triggers_of(rules: Sequence[Rule]) -> list[RunFinishedTrigger]:
    return [t for rule in rules for t in rule.triggers if isinstance(t, RunFinishedTrigger)]


# --- the sweep --------------------------------------------------------------------------------


def sweep_finished_runs(
    session_factory: SessionFactory,
    sender: RunSender,
    now: datetime,
    *,
    automations_disabled: bool = False,
    by: str = "housekeeping",
) -> list[str]:
    """Emit the finish of every run finished since the cursor that a following rule has not
    started yet (the module docstring): the ids of the runs started."""
    with session_factory() as session:
        stored = cursors_db.read(session, CURSOR)
        since = max(datetime.fromisoformat(stored) if stored else now - LAG, now - CATCH_UP)
        followers = rule_triggers.rules_with_trigger(session, RUN_FINISHED)
        pending = _unfollowed(session, followers, since) if followers else []
    started: list[str] = []
    for run_id in pending:
        try:
            started += emit_run_finished(
                session_factory, sender, run_id, automations_disabled=automations_disabled
            )
        except AdeError as exc:  # e.g. the run was pruned meanwhile; the others still go
            log.warning("run %s: its run.finished event was not emitted: %s", run_id, exc.message)
    with session_factory.begin() as session:
        cursors_db.write(session, CURSOR, max(since, now - LAG).isoformat(), by=by, now=now)
    return started


def _unfollowed(session: Session, followers: Sequence[Rule], since: datetime) -> list[str]:
    """The runs finished since `since` with a following rule whose run is not there yet."""
    triggers = _triggers_of(followers)
    literal = {glob for t in triggers for glob in t.rule if not set(glob) & set("*?[")}
    wildcard = any(set(glob) & set("*?[") for t in triggers for glob in t.rule)
    query = select(RunRow.id, RunRow.rule_id, RunRow.status, RunRow.queue_status).where(
        RunRow.finished_at >= since
    )
    if not wildcard:
        query = query.where(RunRow.rule_id.in_(sorted(literal)))
    keys: dict[str, list[str]] = {}
    for run_id, rule_id, status, queue_status in session.execute(query):
        run = {"rule": rule_id, "status": status, "queue_status": queue_status}
        keys[run_id] = [
            follow_key(run_id, rule.id)
            for rule in followers
            if any(isinstance(t, RunFinishedTrigger) and starts_on(t, run) for t in rule.triggers)
        ]
    wanted = [key for run_keys in keys.values() for key in run_keys]
    found = set(runs_db.runs_by_keys(session, wanted)) if wanted else set()
    return [run_id for run_id, run_keys in keys.items() if set(run_keys) - found]
