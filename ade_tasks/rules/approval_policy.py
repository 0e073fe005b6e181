"""Who may release a run's approval gate, and when enough people have: the four-eyes part of
`require_human`.

When a run parks at its gate, `gate_policy` fixes the gate's policy on the pending input: how
many approvals it needs and whose approval does not count (the run's requester, unless the rule
says `requester_may_approve: true`). `count_approval` then counts each approval against it:
distinct approvers by token name (a shared token is one person, whatever `by` it sends), the
requester refused with what to do instead. A decline needs no counting: one ends the gate.

The requester is the token that asked for the run (a manual run from the CLI, the API or the
web form, or an operator's scheduled manual run). A run a schedule, a webhook or an event
started has no requesting token, so nobody is excluded from approving it: a GitHub login is
not a token name, and the engine does not guess that they are the same person.

In the rules room (it reads only the rule and the trigger) so the approvals' queries in `db` can
count a vote without importing the guardrails, which import `db`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ade_tasks.access.actors import token_of
from ade_tasks.errors import PolicyViolationError
from ade_tasks.json_document import JsonObject
from ade_tasks.rules.rule import Rule


@dataclass(frozen=True)
class ApprovalPolicy:
    """What releases one gate: `needed` distinct approvers, none of them `excluded`."""

    needed: int = 1
    excluded: str | None = None  # the requester's token name


def requester_of(trigger: Mapping[str, Any] | None) -> str | None:
    """The token name that asked for a run, from its trigger (None: no token asked)."""
    requested_by = (trigger or {}).get("requested_by")
    return token_of(requested_by) if isinstance(requested_by, str) and requested_by else None


def gate_policy(rule: Rule, trigger: Mapping[str, Any] | None) -> ApprovalPolicy:
    """The policy of the rule's gate for a run with this trigger; a `verify_before_publish`
    gate of a rule without `require_human` takes one approval by anyone, as it always did."""
    settings = rule.guardrails.human_approval()
    if settings is None:
        return ApprovalPolicy()
    excluded = None if settings.requester_may_approve else requester_of(trigger)
    return ApprovalPolicy(needed=settings.approvals, excluded=excluded)


@dataclass(frozen=True)
class Tally:
    """The approvals a gate has after one more was counted, and whether they release it."""

    votes: list[JsonObject]
    counted: bool  # False: this token had approved already (it counts once)
    released: bool


def count_approval(
    votes: Sequence[Mapping[str, Any]] | None,
    policy: ApprovalPolicy,
    *,
    by: str,
    note: str | None,
    at: datetime,
    run_id: str,
) -> Tally:
    """Count `by`'s approval of run `run_id`'s gate; PolicyViolationError when `by` is the
    excluded requester."""
    token = token_of(by)
    if policy.excluded is not None and token == policy.excluded:
        raise PolicyViolationError(
            f"run {run_id} was requested by token {token!r}, and its rule wants someone else "
            "to approve it (guardrails.require_human.requester_may_approve is false): ask an "
            f"operator with another token to run `ade-tasks runs approve {run_id}`, or reject "
            "it yourself; a single-operator setup writes `require_human: "
            "{requester_may_approve: true}` in the rule"
        )
    earlier = [dict(vote) for vote in votes or ()]
    counted = all(vote.get("token") != token for vote in earlier)
    if counted:
        earlier.append({"token": token, "by": by, "at": at.isoformat(), "note": note})
    return Tally(votes=earlier, counted=counted, released=len(earlier) >= policy.needed)
