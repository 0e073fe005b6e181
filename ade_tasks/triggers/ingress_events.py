"""The worker side of ingress: match a stored event to the rules whose triggers fit it and
dispatch it to each (`ade.ingress.dispatch`). In the triggers room, which ingress never imports.

Every outcome is recorded on the event: the runs it started, the rules that refused it, or the
error that stopped it. An event that raises is marked `failed` and never blocks the next one,
with two exceptions that keep it `received` instead:

- **A database error is not the event's fault.** When matching or dispatching fails because the
  database connection died or the database refused the work (`is_database_error`: SQLAlchemy's
  `OperationalError`, a `DBAPIError` whose connection was invalidated or whose SQLSTATE is a
  connection class, the driver's own `OperationalError`, `DatabaseUnavailableError`), the claim
  is released and the event stays `received`: the recovery sweep re-sends it and it is matched
  once the database answers. Runs it had started already keep their idempotency keys, so the
  second matching starts nothing twice.
- **Poison.** A worker claims an event before matching it (`ingress_db.claim_event`: one more
  attempt, committed first). An event claimed `ingress_db.MAX_ATTEMPTS` times without its
  matching ever finishing (its worker was killed, ran out of memory, was stopped each time) is
  recorded failed on its next delivery without being matched again, so the sweep cannot hand
  it from worker to worker forever.

**Time bound.** Matching one event may take `MATCH_DEADLINE_SECONDS`; past it the event is
recorded failed with the reason and no rule runs for it (matching is all or nothing: a partial
answer would depend on the order rules happen to be stored in). The deadline is checked before
each trigger is matched, which bounds the whole only because each check is bounded too: rule
regexes run on RE2 in linear time (`ade_tasks.patterns`), over texts of at most
`patterns.MAX_SUBJECT_CHARS` with programs of at most `patterns.MAX_PROGRAM_SIZE`
instructions, so one check costs about a second at worst and microseconds usually. Python
cannot interrupt a running C-level regex search from another thread, and a process per event
would cost more than matching itself; bounding what one check may cost is the honest way to
make the deadline hold.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Mapping

from sqlalchemy.exc import DBAPIError, OperationalError

from ade_tasks.clock import utcnow
from ade_tasks.db import ingress as ingress_db
from ade_tasks.db.engine import SessionFactory
from ade_tasks.db.retry import is_connection_lost, retrying
from ade_tasks.errors import AdeError, DatabaseUnavailableError, TransientError
from ade_tasks.ingress.event import NormalizedEvent
from ade_tasks.ingress.github import GITHUB_SOURCES, own_identity, trigger_types
from ade_tasks.json_document import JsonObject
from ade_tasks.rules.rule import Rule
from ade_tasks.rules.triggers import Trigger
from ade_tasks.runs.dispatch import AUTOMATIONS_DISABLED
from ade_tasks.runs.dispatch_results import DispatchResult
from ade_tasks.runs.senders import RunSender
from ade_tasks.runs.trigger_events import TriggerEvent
from ade_tasks.states import IngressStatus
from ade_tasks.triggers.local_events import emit
from ade_tasks.triggers.matcher import Refusal, TriggerTest
from ade_tasks.triggers.registry import follow_on_events, trigger_test
from ade_tasks.triggers.verdicts import MatchReport

log = logging.getLogger(__name__)

#: How long matching one event may take (see the module docstring); well within
#: `ingress_db.CLAIM_HOLD`, so no second worker starts on an event still being matched.
MATCH_DEADLINE_SECONDS = 10.0


class MatchDeadlineError(AdeError):
    """Matching the event took longer than its time bound."""


class EventDeferredError(TransientError):
    """The event could not be matched now (the database failed); it stays `received`."""


def match_ingress_event(
    session_factory: SessionFactory,
    sender: RunSender,
    event_id: int,
    *,
    deadline: float = MATCH_DEADLINE_SECONDS,
    clock: Callable[[], float] = time.monotonic,
    automations_disabled: bool = False,
    own_logins: Collection[str] = (),
) -> IngressStatus | None:
    """Match and dispatch one stored event; None when it was already handled (a redelivery)
    or another worker is matching it. EventDeferredError when the database failed under it:
    it stays `received` for the recovery sweep.

    While `automations_disabled` (the kill switch) is on, the event is held: left `received`
    and unclaimed (None), so no delivery is lost; its matching record says it is held and why
    (`ingress_db.hold_event`), the recovery sweep hands it back, and once the switch is off it
    is matched and run like any other (within the 7 days events are kept).

    A GitHub event starts every trigger type it stands for (`ingress.github.trigger_types`:
    its own, `github.pr_labeled` for a label, `github.event`), and is marked `by_engine` when
    its sender is one of `own_logins` (the engine's own GitHub identities,
    `ADE_GITHUB__BOT_LOGINS`), which only triggers with `include_own: true` accept.

    Every outcome also records the event's matching verdicts: what became of each candidate
    rule (a trigger of a type it starts, for its hook or repository when the trigger names one;
    `ade_tasks.triggers.verdicts`)."""
    if automations_disabled:
        log.info("ingress event %s held: automations are disabled on this cluster", event_id)
        _hold(session_factory, event_id)
        return None
    with session_factory.begin() as session:
        claimed = ingress_db.claim_event(session, event_id, utcnow())
    if claimed is None:
        return None
    if claimed.attempts > ingress_db.MAX_ATTEMPTS:
        reason = (
            f"not matched: {ingress_db.MAX_ATTEMPTS} workers started matching this event and "
            "none finished (each was killed or stopped while matching it), so it is not tried "
            "again; see the worker logs, then re-deliver it from its sender"
        )
        _finish(session_factory, event_id, IngressStatus.FAILED, [], reason, None)
        return IngressStatus.FAILED
    runs: list[str] = []
    refusals: list[str] = []
    matching: JsonObject | None
    try:  # a payload that cannot be read fails the event below, never the worker's loop
        types = _types_started(claimed.source, claimed.trigger_type, claimed.payload)
        report = MatchReport(types[0] if types else claimed.trigger_type or claimed.source)
        if not types:
            matching = report.to_json(
                f"the {claimed.source} event is of no trigger type a rule can have, so no "
                "rule was matched against it"
            )
        else:
            payload = claimed.payload
            if claimed.source in GITHUB_SOURCES:
                payload = own_identity(payload, own_logins)
            delivery = claimed.delivery_id or str(claimed.id)
            event = TriggerEvent(types[0], claimed.summary, payload, f"{claimed.source}:{delivery}")
            tests = {kind: trigger_test(claimed.source, kind, payload) for kind in types}
            match = _bounded(lambda rule, t: tests[t.type](rule, t), deadline, clock)
            for rule_id, result in emit(
                session_factory,
                sender,
                event,
                match,
                types=types,
                report=report,
                source=claimed.source,
            ):
                if isinstance(result, DispatchResult):
                    runs.append(result.run.id)
                else:
                    refusals.append(f"rule {rule_id!r}: {result.message}")
            if claimed.trigger_type is not None:
                runs += _follow_ons(session_factory, sender, claimed.trigger_type, payload, report)
            matching = report.to_json()
        status, error = IngressStatus.DISPATCHED, "; ".join(refusals) or None
    except Exception as exc:  # recorded on the event; the next event is not held up
        if is_database_error(exc):
            _release(session_factory, event_id)
            raise EventDeferredError(
                f"ingress event {event_id} was not matched: the database failed under it "
                f"({_first_line(exc)}); it stays received and the recovery sweep re-sends it"
            ) from exc
        if isinstance(exc, MatchDeadlineError):
            log.warning("ingress event %s: %s", event_id, exc.message)
            status, error = IngressStatus.FAILED, exc.message
        else:
            log.exception("ingress event %s could not be dispatched", event_id)
            detail = exc.message if isinstance(exc, AdeError) else repr(exc)
            status, error = IngressStatus.FAILED, f"matching or dispatching failed: {detail}"
        matching = None  # all or nothing, as the runs: the error says why
    _finish(session_factory, event_id, status, runs, error, matching)
    return status


def _types_started(
    source: str, trigger_type: str | None, payload: Mapping[str, object]
) -> tuple[str, ...]:
    """The trigger types a stored event starts, its own first."""
    own = (trigger_type,) if trigger_type else ()
    if source not in GITHUB_SOURCES:
        return own
    try:
        return trigger_types(NormalizedEvent.from_payload(payload))
    except ValueError:  # not a normalized event: its own type only, as before
        return own


def is_database_error(exc: BaseException) -> bool:
    """Did the database fail (a lost connection, a refused or timed-out statement), rather
    than the event or a rule? Follows the chain of causes, so a wrapped error counts too."""
    seen: set[int] = set()
    error: BaseException | None = exc
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, DatabaseUnavailableError | OperationalError):
            return True
        if isinstance(error, DBAPIError) and is_connection_lost(error):
            return True
        # The driver's own error, raised outside SQLAlchemy (psycopg, sqlite3): by class name,
        # since ade_tasks does not import the drivers.
        if any(
            kind.__name__ == "OperationalError"
            and kind.__module__.startswith(("psycopg", "sqlite3"))
            for kind in type(error).__mro__
        ):
            return True
        error = error.__cause__ or error.__context__
    return False


def _bounded(match: TriggerTest, deadline: float, clock: Callable[[], float]) -> TriggerTest:
    """`match`, refusing to start one more trigger once `deadline` seconds have passed."""
    started = clock()
    checked = 0

    def bounded(rule: Rule, trigger: Trigger) -> Refusal | None:
        nonlocal checked
        elapsed = clock() - started
        if elapsed > deadline:
            raise MatchDeadlineError(
                f"matching exceeded its time bound of {deadline:g} s ({elapsed:.1f} s after "
                f"{checked} trigger(s), stopped before rule {rule.id!r}); no "
                "rule was started for this event. Narrow the rules' filters (type, repo, "
                "branches) so fewer regexes run per event"
            )
        checked += 1
        return match(rule, trigger)

    return bounded


def _finish(
    session_factory: SessionFactory,
    event_id: int,
    status: IngressStatus,
    runs: list[str],
    error: str | None,
    matching: JsonObject | None,
) -> None:
    # Safe to repeat: the same UPDATE of the same event. A connection that dies here leaves the
    # event received and claimed; its next claim matches it again and finds its runs by key.
    retrying(
        session_factory,
        lambda session: ingress_db.finish_event(
            session, event_id, status, runs, error, matching=matching
        ),
        what=f"recording ingress event {event_id}",
    )


def _hold(session_factory: SessionFactory, event_id: int) -> None:
    """Say on a held event that it is held and why (it stays received and unclaimed)."""
    try:
        with session_factory.begin() as session:
            ingress_db.hold_event(session, event_id, f"held: {AUTOMATIONS_DISABLED}", utcnow())
    except Exception as exc:  # the event is held all the same; only the note is missing
        log.warning("ingress event %s: its hold was not recorded: %s", event_id, _first_line(exc))


def _release(session_factory: SessionFactory, event_id: int) -> None:
    try:
        retrying(
            session_factory,
            lambda session: ingress_db.release_event(session, event_id),
            what=f"releasing ingress event {event_id}",
        )
    except Exception as exc:  # the claim then lapses after CLAIM_HOLD; the attempt counts
        log.warning("ingress event %s keeps its claim: %s", event_id, _first_line(exc))


def _first_line(exc: BaseException) -> str:
    text = str(getattr(exc, "orig", None) or exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _follow_ons(
    session_factory: SessionFactory,
    sender: RunSender,
    kind: str,
    payload: dict[str, object],
    report: MatchReport,
) -> list[str]:  # only reached with the kill switch off (see match_ingress_event)
    """Dispatch the further events this one stands for (a merged pull request from a lane's
    branch is that lane's `lane.merged`); the runs they started (their verdicts: `report`)."""
    runs = []
    for source, event in follow_on_events(session_factory, kind, payload):
        match = trigger_test(source, event.type, event.payload)
        for _, result in emit(session_factory, sender, event, match, report=report, source=source):
            if isinstance(result, DispatchResult):
                runs.append(result.run.id)
    return runs
