"""The plan of a claimed run: its rule, trigger and actions, where they run, and what an
earlier attempt of it already did (a run resumed after an approval or a lost worker)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.orm import Session

from ade_tasks.clock import utcnow
from ade_tasks.db import approvals as approvals_db
from ade_tasks.db import rules as rules_db
from ade_tasks.db import run_recovery as run_recovery_db
from ade_tasks.db import run_steps as run_steps_db
from ade_tasks.db import runs as runs_db
from ade_tasks.db import usage as usage_db
from ade_tasks.db.schema import RunStepRow
from ade_tasks.errors import AdeError
from ade_tasks.json_document import JsonObject
from ade_tasks.rules.rule import Rule
from ade_tasks.rules.steps import Action
from ade_tasks.settings import Settings


@dataclass(frozen=True)
class RunPlan:
    """A claimed run that can start: its rule, trigger, where its actions run, and what an
    earlier attempt of it already did (a run resumed after an approval)."""

    rule: Rule
    actions: list[Action]
    trigger: JsonObject
    project_root: Path
    done: list[RunStepRow]
    approved: frozenset[int]
    started: float  # time.monotonic() when this worker took the run
    interruption: run_recovery_db.Interruption | None = None  # what lost workers left to decide

    def charge(self) -> usage_db.Charge:
        """The run-seconds this attempt charges to the rule's billing code, as it ends."""
        spent = round(time.monotonic() - self.started, 3)
        return usage_db.Charge(self.rule.billing_code, usage_db.day_of(utcnow()), spent)


def plan_run(
    session: Session, settings: Settings, claimed: runs_db.ClaimedRun, started: float
) -> RunPlan:
    """What the claimed run will do; AdeError when its rule is gone or no longer trusted."""
    if claimed.rule_hash is None:
        raise rules_db.rule_not_found(claimed.rule_id)
    rule = rules_db.cached_rule(claimed.rule_hash)
    if rule is None or claimed.rule_trust == rules_db.UNTRUSTED:
        snapshot = rules_db.rule_snapshot(session, claimed.rule_id)
        rule = snapshot.rule
        if snapshot.untrusted_reason():
            raise AdeError(snapshot.untrusted_reason())
    done: list[RunStepRow] = []
    approved: frozenset[int] = frozenset()
    interruption = None
    if claimed.attempt > 1:  # resumed (after an approval or a lost worker): keep what was done
        done = [s for s in run_steps_db.list_steps(session, claimed.id) if s.status != "running"]
        approved = approvals_db.approved_steps(session, claimed.id)
        interruption = run_recovery_db.interruption_of(session, claimed.id)
    return RunPlan(
        rule=rule,
        actions=list(rule.execution.actions),
        trigger=dict(claimed.trigger),
        project_root=settings.project_root(rule.project),
        done=done,
        approved=approved,
        started=started,
        interruption=interruption,
    )
