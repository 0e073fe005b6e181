"""Enabling and disabling a rule: whether its automatic triggers run it."""

from __future__ import annotations

from fastapi import APIRouter

from ade_api.http.deps import ServicesDep
from ade_api.http.health_state import rule_out, set_enabled
from ade_api.http.routes.rules import NOT_FOUND
from ade_api.http.schemas.problem import Problem
from ade_api.http.schemas.rules import RuleOut

router = APIRouter(prefix="/api/v1/rules", tags=["rules"])


def _set_enabled(rule_id: str, enabled: bool, services: ServicesDep, force: bool = True) -> RuleOut:
    with services.session_factory.begin() as session:
        row, state = set_enabled(session, services.settings, rule_id, enabled, force=force)
        return rule_out(row, state)


@router.post(
    "/{rule_id}/enable",
    responses={**NOT_FOUND, 409: {"model": Problem, "description": "the rule cannot fire"}},
)
def enable_rule(rule_id: str, services: ServicesDep, force: bool = False) -> RuleOut:
    """Enable a rule: its automatic triggers (schedules, events) run it again. Not a new version;
    for a rule from a file, the file's `enabled` applies again when the file next changes.

    A rule that cannot fire (its `health` is not ready: say, a github.* trigger while
    ADE_GITHUB__WEBHOOK_SECRET is unset and no poller runs) is refused with 409 naming each
    setup error, unless `force=true`."""
    return _set_enabled(rule_id, True, services, force)


@router.post("/{rule_id}/disable", responses=NOT_FOUND)
def disable_rule(rule_id: str, services: ServicesDep) -> RuleOut:
    """Disable a rule: its automatic triggers stop running it (manual runs stay allowed, as for
    `enabled: false` in a file). Not a new version; for a rule from a file, the file's `enabled`
    applies again when the file next changes."""
    return _set_enabled(rule_id, False, services)
