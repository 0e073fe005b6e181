"""How one relayed delivery enters the cluster: through the same intake as a direct one.

A GitHub delivery is normalized and stored as source `github` under its X-GitHub-Delivery id,
a custom hook's as `webhook:<hook>` under the hook's delivery id, exactly as the webhook routes
store them (`ade_tasks.ingress.intake.github_row`, `hook_row`); the ingress workers then match
and dispatch it. So a delivery that reached the cluster directly and through the relay is
stored once and runs once, whichever came first.

The relay verified the signature (it holds the secrets; the cluster need not), so nothing is
verified again here: a timestamped scheme (Stripe, Standard Webhooks) would refuse a delivery
relayed later than its tolerance. The relay is trusted through its token.

A delivery the intake refuses (unknown source, a custom hook this cluster does not configure,
a body that is not JSON, a GitHub payload `normalize` cannot read) is **poison**: it is
recorded as a failed ingress event with the reason (`ade-tasks events`, `GET /api/v1/ingress`),
and on the hook's delivery log for a configured hook, and `PoisonEventError` tells the drain to
go on with the next. A database or broker failure is not poison: it propagates, and the drain
stops before committing its cursor.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import NoReturn

from ade_tasks.db import ingress as ingress_db
from ade_tasks.db.engine import SessionFactory
from ade_tasks.errors import AdeError
from ade_tasks.hooks.config import HookConfig, filters_match
from ade_tasks.ingress import intake
from ade_tasks.ingress.github import normalize
from ade_tasks.relay.wire import RelayedEvent
from ade_tasks.runs.senders import IngressSender


class PoisonEventError(AdeError):
    """The cluster's intake refused a relayed event; it was recorded and is skipped."""


class Outcome(StrEnum):
    """What became of a relayed event that was not poison."""

    STORED = "stored"
    DUPLICATE = "duplicate"  # seen before (directly, or relayed twice)
    IGNORED = "ignored"  # a ping, or a hook delivery its filters leave out


def accept(
    session_factory: SessionFactory,
    sender: IngressSender,
    relayed: RelayedEvent,
    hooks: Mapping[str, HookConfig],
) -> Outcome:
    """Hand one relayed event to the intake; PoisonEventError (after recording it) when the
    intake refuses it."""
    if relayed.source == intake.GITHUB:
        return _github(session_factory, sender, relayed)
    if relayed.source.startswith(intake.HOOK_PREFIX):
        return _hook(session_factory, sender, relayed, hooks)
    _poison(
        session_factory,
        relayed,
        f"unknown source {relayed.source!r} (expected github or webhook:<hook>); is the relay "
        "a newer version than this cluster?",
    )


def _github(
    session_factory: SessionFactory, sender: IngressSender, relayed: RelayedEvent
) -> Outcome:
    if relayed.problem is not None:
        _poison(session_factory, relayed, relayed.problem)
    if relayed.event is None or relayed.delivery_id is None:
        _poison(session_factory, relayed, "a GitHub delivery without its event name or id")
    if relayed.event == "ping":
        return Outcome.IGNORED
    try:
        event = normalize(relayed.event, relayed.delivery_id, intake.parse_json(relayed.body))
    except ValueError as exc:
        _poison(session_factory, relayed, str(exc))
    stored = intake.store_event(
        session_factory, sender, intake.github_row(event, relayed.delivery_id, relayed.body)
    )
    return Outcome.DUPLICATE if stored.duplicate else Outcome.STORED


def _hook(
    session_factory: SessionFactory,
    sender: IngressSender,
    relayed: RelayedEvent,
    hooks: Mapping[str, HookConfig],
) -> Outcome:
    hook_id = relayed.source.removeprefix(intake.HOOK_PREFIX)
    hook = hooks.get(hook_id)
    if hook is None:
        _poison(
            session_factory,
            relayed,
            f"custom hook {hook_id!r} is not configured on this cluster; configure "
            f"ADE_HOOKS__{hook_id} here as on the relay",
        )
    try:
        document = intake.parse_json(relayed.body if relayed.problem is None else b"")
    except ValueError as exc:
        reason = relayed.problem or str(exc)
        _log(session_factory, hook_id, relayed, 400, f"refused: {reason}", None)
        _poison(session_factory, relayed, reason)
    matched, why = filters_match(hook.filters, document)
    if not matched:
        _log(session_factory, hook_id, relayed, 202, f"ignored: {why}", None)
        return Outcome.IGNORED
    stored = intake.store_event(
        session_factory, sender, intake.hook_row(hook_id, relayed.delivery_id, document)
    )
    outcome = "accepted" if stored.event_id else "duplicate"
    _log(
        session_factory, hook_id, relayed, 202 if stored.event_id else 200, outcome, stored.event_id
    )
    return Outcome.DUPLICATE if stored.duplicate else Outcome.STORED


def _poison(session_factory: SessionFactory, relayed: RelayedEvent, reason: str) -> NoReturn:
    """Record the refusal as a failed ingress event and raise PoisonEventError."""
    message = f"relayed event {relayed.cursor} refused: {reason}"
    intake.store_malformed(
        session_factory,
        source=relayed.source[:80],
        delivery_id=relayed.delivery_id or f"relay-cursor:{relayed.cursor}",
        error=message,
    )
    raise PoisonEventError(message)


def _log(
    session_factory: SessionFactory,
    hook_id: str,
    relayed: RelayedEvent,
    status: int,
    outcome: str,
    event_id: int | None,
) -> None:
    with session_factory.begin() as session:
        ingress_db.log_delivery(
            session,
            hook_id=hook_id,
            status_code=status,
            outcome=f"{outcome} (via the relay, cursor {relayed.cursor})",
            delivery_id=relayed.delivery_id,
            event_id=event_id,
            headers={},
            body=relayed.body,
        )
