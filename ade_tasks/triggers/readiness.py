"""Whether a trigger can fire, and by which path: the readiness check of each built-in trigger
kind, which its declaration (`ade_tasks.triggers.registry.KINDS`) names and rule health
(`ade_tasks.triggers.health`) asks. Each answers (path, None) when ready, else (None, the error).

The checks read a `DeliveryState`: what the settings configure and which beats, relay drains
and pollers are alive (`ade_tasks.db.heartbeats`); `rule_health.LiveState` is one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any, Protocol

from ade_tasks.db.heartbeats import BEAT, POLLER, RELAY_DRAIN, Heartbeat
from ade_tasks.ingress.poller import POLLED_TYPES
from ade_tasks.rules.triggers import (
    FileTrigger,
    GithubTrigger,
    GitTrigger,
    LaneTrigger,
    ManualTrigger,
    RunFinishedTrigger,
    ScheduleTrigger,
    WebhookTrigger,
)

GITHUB_UNSIGNED = "GitHub deliveries are refused: ADE_GITHUB__WEBHOOK_SECRET is not set"
GITHUB_REFUSED = f"{GITHUB_UNSIGNED}; set it or run `ade-tasks poll github`"
NO_BEAT = (
    "no beat is running (none has sent a heartbeat within its interval): schedules fire only "
    "from a beat; start `ade-tasks beat` (or `ade-tasks dev`, or a worker with -B)"
)
#: A poller whose latest poll of a repository failed still counts as a path for it while it
#: polled it successfully this recently (one failed poll among good ones is a blip, not an
#: outage); one that never polled it successfully does not count from its first failure.
POLL_FAILING_AFTER = timedelta(minutes=5)


class DeliveryState(Protocol):
    """What a readiness check looks at, at `now`."""

    @property
    def now(self) -> datetime: ...
    @property
    def github_secret(self) -> bool: ...
    @property
    def hooks(self) -> frozenset[str]: ...
    @property
    def rules(self) -> Mapping[str, bool] | None:
        """Stored rule id -> enabled; None: not known."""

    def alive(self, kind: str) -> list[Heartbeat]:
        """The live processes of one kind, the most recently seen first."""


Readiness = tuple[str | None, str | None]
"""(the path that fires the trigger, None) when it is ready, else (None, why it is not)."""

ReadinessCheck = Callable[[Any, DeliveryState], Readiness]
"""A trigger kind's check: its trigger (of the kind's model) and the state it looks at."""


def schedule_ready(_trigger: ScheduleTrigger, state: DeliveryState) -> Readiness:
    beats = state.alive(BEAT)
    if not beats:
        return None, NO_BEAT
    more = f" (and {len(beats) - 1} more)" if len(beats) > 1 else ""
    return f"beat {beats[0].process_id}{more}", None


def manual_ready(_trigger: ManualTrigger, _state: DeliveryState) -> Readiness:
    return "manual run (API, CLI)", None


def webhook_ready(trigger: WebhookTrigger, state: DeliveryState) -> Readiness:
    if trigger.hook in state.hooks:
        return f"POST /api/v1/webhooks/{trigger.hook}", None
    return None, (
        f"custom webhook {trigger.hook!r} is not configured: deliveries to "
        f"POST /api/v1/webhooks/{trigger.hook} are refused (404); configure it with "
        f"ADE_HOOKS__{trigger.hook}='{{\"scheme\": ...}}'"
    )


def github_ready(trigger: GithubTrigger, state: DeliveryState) -> Readiness:
    if state.github_secret:
        return "GitHub webhook (POST /api/v1/webhooks/github)", None
    drains = state.alive(RELAY_DRAIN)
    if drains and drains[0].error is None:
        return f"relay {drains[0].relay} (drained by beat {_beat_of(drains[0])})", None
    pollers = state.alive(POLLER)
    if drains and not pollers:
        return None, (
            f"{GITHUB_UNSIGNED}, and the drain of relay {drains[0].relay} is failing: "
            f"{drains[0].error}"
        )
    if not pollers:
        return None, GITHUB_REFUSED
    if trigger.type not in POLLED_TYPES:
        # github.event: polling infers a few deliveries only, never an event named by a rule.
        what = f"{trigger.type} ({trigger.event})" if trigger.event else trigger.type
        return None, (
            f"{GITHUB_UNSIGNED}, and polling cannot see {what} events; set the "
            "secret and point a GitHub webhook at POST /api/v1/webhooks/github"
        )
    covering = [poller for poller in pollers if _polls(poller, trigger.repo)]
    failures = [_poll_failure(poller, trigger.repo, state.now) for poller in covering]
    for poller, failure in zip(covering, failures, strict=True):
        if failure is None:
            polled = ", ".join(poller.repos) if poller.repos else "repositories of enabled rules"
            return f"poller {poller.process_id} ({polled})", None
    wanted = trigger.repo or "the repositories"
    if failures:
        return None, (
            f"{GITHUB_UNSIGNED}, and the polls of {wanted} fail: {'; '.join(map(str, failures))}"
        )
    return None, (
        f"{GITHUB_UNSIGNED}, and no running poller polls {wanted}; set the secret, set "
        f"`repo` on the trigger, or run `ade-tasks poll github --repos "
        f"{trigger.repo or 'OWNER/NAME'}`"
    )


def _polls(poller: Heartbeat, repo: str | None) -> bool:
    """Does this poller poll `repo` (None: a trigger of any repository)?"""
    if poller.repos is None:
        return repo is not None  # it polls the `repo` filters of enabled triggers
    return repo is None or repo.lower() in {r.lower() for r in poller.repos}


def _poll_failure(poller: Heartbeat, repo: str | None, now: datetime) -> str | None:
    """Why this poller's polls of `repo` (None: of every repository it polled) fail, or None
    while one of them succeeds (or none was tried yet)."""
    outcomes = [
        (name, found)
        for name, found in poller.polls.items()
        if repo is None or name == repo.lower()
    ]
    if not outcomes or any(
        not found.failing or (found.ok_at and now - found.ok_at <= POLL_FAILING_AFTER)
        for _, found in outcomes
    ):
        return None
    name, found = max(outcomes, key=lambda item: item[1].failed_at or now)
    last = f"{found.ok_at:%Y-%m-%d %H:%M:%S} UTC" if found.ok_at else "never"
    return (
        f"poller {poller.process_id} last polled {name} at {found.failed_at:%H:%M:%S} UTC and "
        f"failed ({found.error}); its last successful poll: {last}"
    )


def _beat_of(drain: Heartbeat) -> str:
    return drain.process_id.removesuffix("/relay")


def local_ready(trigger: GitTrigger | FileTrigger, _state: DeliveryState) -> Readiness:
    if trigger.type == "git.push":
        return "GitHub push webhooks or local events (`ade-tasks emit`, its git hooks)", None
    if trigger.type == "file.changed":
        return "local events (`ade-tasks watch`, `ade-tasks emit`)", None
    return "local events (`ade-tasks emit`, the git hooks it installs)", None


def lane_ready(trigger: LaneTrigger, state: DeliveryState) -> Readiness:
    if trigger.type == "lane.merged":  # a merged pull request from the lane's branch
        return github_ready(GithubTrigger(type="github.pr_merged"), state)
    return "lane events of runs (the engine's own)", None


def run_finished_ready(trigger: RunFinishedTrigger, state: DeliveryState) -> Readiness:
    followed = ", ".join(trigger.rule)
    if state.rules is None:
        return f"runs of rule {followed} finishing", None
    found = sorted(rule_id for rule_id in state.rules if trigger.follows(rule_id))
    enabled = [rule_id for rule_id in found if state.rules[rule_id]]
    if enabled:
        return f"runs of rule {', '.join(enabled)} finishing", None
    if found:
        return None, (
            f"the rules it follows ({', '.join(found)}) are disabled, so only their manual runs "
            "finish; enable one of them"
        )
    return None, (
        f"no stored rule matches {followed}, so no run it follows ever finishes; check the "
        "rule ids (`ade-tasks rules list`)"
    )
