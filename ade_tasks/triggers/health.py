"""Rule health: can this rule fire, and by which path? If not, what is wrong and what to do.

`rule_health(rule, state)` is a pure function of a rule and a `LiveState` snapshot (what the
settings configure and which beats and pollers are alive, `ade_tasks.db.heartbeats`); the API
builds the snapshot (`ade_api.http.health_state`). Per trigger it answers `ready` with the path that
will fire it, or the setup error in words:

- `schedule`: ready when a beat's heartbeat is within its interval; path `beat <id>`.
- `manual`: always ready; path `manual run (API, CLI)`.
- `webhook`: ready when `ADE_HOOKS__<hook>` is configured; path `POST /api/v1/webhooks/<hook>`.
- `github.*` (and `lane.merged`, a merged pull request): ready when ADE_GITHUB__WEBHOOK_SECRET
  is set (path `GitHub webhook`), or a relay drain's heartbeat is within its slot and its last
  drain succeeded (path `relay <url>`; every event type comes through a relay), or a live
  poller polls the trigger's repository, its polls of it do not fail, and polling can see the
  event type (path `poller <id>`; never `github.event`, whose events polling does not infer).
  A relay drain that is alive but failing is reported with its error; so is a poller whose
  latest poll of the repository failed and that has not polled it successfully within
  `POLL_FAILING_AFTER` (never, for a poller without a token or that cannot reach GitHub).
- `git.*`, `file.changed`: always ready: local events (`ade-tasks emit`, its git hooks,
  `ade-tasks watch`) need no set-up the engine could see.
- `lane.created`, `lane.deleted`: always ready: the engine's own runs make these events.
- `run.finished`: ready when a stored rule its `rule` globs name is enabled (path `runs of
  rule X finishing`); not ready when none is stored (a misspelt id never fires) or every one
  is disabled (only their manual runs would finish). Without the stored rules in the snapshot
  (`LiveState.rules` None), ready.

Beside the triggers, problems of the whole rule stop every trigger: an untrusted shared rule,
an agent provider that is not set up (as `ade-tasks providers` decides, without a network call),
a project that is not configured. A rule is `ready` when it has no such problem and every
trigger is ready. Whether it is enabled is its own state, not part of its health.

A pause (`ade_tasks.db.pauses`) holds triggers: a paused trigger, and every automatic trigger
of a paused rule, is not ready, its error the pause's note with who paused it and since when
(`paused` marks it; its `path` still says what fires it once resumed). A manual trigger is never
paused, so a paused rule whose only trigger is manual stays ready.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from ade_tasks.db.heartbeats import BEAT, POLLER, RELAY_DRAIN, Heartbeat
from ade_tasks.db.pauses import Pause, holding
from ade_tasks.ingress.poller import POLLED_TYPES
from ade_tasks.rules.rule import Rule
from ade_tasks.rules.schedules import rule_schedules
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


@dataclass(frozen=True)
class ProviderReadiness:
    """Is an agent provider set up where the rules run, and if not, how to fix it."""

    ready: bool
    fixes: tuple[str, ...] = ()


@dataclass(frozen=True)
class LiveState:
    """What rule health looks at: the configured set-up and the live processes, at `now`."""

    now: datetime
    github_secret: bool = False
    hooks: frozenset[str] = frozenset()
    projects: frozenset[str] = frozenset({"default"})
    providers: Mapping[str, ProviderReadiness] = field(default_factory=dict)
    heartbeats: tuple[Heartbeat, ...] = ()
    #: Stored rule id -> enabled, for run.finished triggers; None: not known.
    rules: Mapping[str, bool] | None = None
    #: Rule id -> its pauses (`ade_tasks.db.pauses.pauses_of`).
    pauses: Mapping[str, Sequence[Pause]] = field(default_factory=dict)

    def alive(self, kind: str) -> list[Heartbeat]:
        """The live processes of one kind, the most recently seen first."""
        live = [h for h in self.heartbeats if h.kind == kind and h.alive(self.now)]
        return sorted(live, key=lambda h: h.seen_at, reverse=True)


@dataclass(frozen=True)
class TriggerStatus:
    """One trigger's delivery status: ready with the path that fires it, or the error."""

    index: int
    type: str
    ready: bool
    path: str | None = None
    error: str | None = None
    #: The pause that holds it (then `error` is its reason).
    paused: Pause | None = None

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready form."""
        return {
            "index": self.index,
            "type": self.type,
            "ready": self.ready,
            "path": self.path,
            "error": self.error,
            "paused": self.paused is not None,
        }


@dataclass(frozen=True)
class Untrusted:
    """A shared rules file not yet trusted: which file, and the hash that trusts it."""

    source_file: str | None
    source_hash: str | None


@dataclass(frozen=True)
class RuleHealth:
    """Can a rule fire: per trigger, and the problems that stop all of them."""

    rule_id: str
    triggers: tuple[TriggerStatus, ...]
    problems: tuple[str, ...] = ()

    @property
    def ready(self) -> bool:
        """No problem of the whole rule, and every trigger ready."""
        return not self.problems and all(t.ready for t in self.triggers)

    @property
    def errors(self) -> list[str]:
        """Everything that stops it, in words: the rule's problems, then each trigger's."""
        return [
            *self.problems,
            *(f"triggers.{t.index} ({t.type}): {t.error}" for t in self.triggers if t.error),
        ]

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready form."""
        return {
            "ready": self.ready,
            "problems": list(self.problems),
            "triggers": [t.as_dict() for t in self.triggers],
        }


def unreadable(rule_id: str, reason: str) -> RuleHealth:
    """The health of a rule whose stored document cannot be read: nothing fires it."""
    return RuleHealth(rule_id, (), (f"its stored document cannot be read ({reason})",))


def rule_health(rule: Rule, state: LiveState, untrusted: Untrusted | None = None) -> RuleHealth:
    """Per trigger, the path that fires it or why none can; and the rule's own problems."""
    schedule_problems = {
        found.index: found.problem for found in rule_schedules(rule, state.now, 1) if found.problem
    }
    pauses = state.pauses.get(rule.id, ())
    statuses = []
    for index, trigger in enumerate(rule.triggers):
        path: str | None
        error: str | None
        if index in schedule_problems:
            path, error = None, schedule_problems[index]
        else:
            path, error = _CHECKS[type(trigger)](trigger, state)
        pause = None if trigger.type == "manual" else holding(pauses, [index])
        if pause is not None:
            error = pause.reason if error is None else f"{pause.reason}; besides, {error}"
        statuses.append(TriggerStatus(index, trigger.type, error is None, path, error, pause))
    return RuleHealth(rule.id, tuple(statuses), tuple(_rule_problems(rule, state, untrusted)))


def _rule_problems(rule: Rule, state: LiveState, untrusted: Untrusted | None) -> list[str]:
    problems = []
    if untrusted is not None:
        where = untrusted.source_file or "its shared rules file"
        problems.append(
            f"untrusted shared config {where}: no trigger runs it until it is trusted; review "
            f"it, then `ade-tasks rules trust {untrusted.source_hash}`"
        )
    if rule.project not in state.projects:
        problems.append(
            f"project {rule.project!r} is not configured: set "
            f"ADE_PROJECTS__{rule.project.upper()}=/path/to/repository"
        )
    for provider in _providers(rule):
        readiness = state.providers.get(provider)
        if readiness is None or not readiness.ready:
            fixes = "; ".join(readiness.fixes) if readiness else "no such provider"
            problems.append(f"agent provider {provider!r} is not set up: {fixes}")
    return problems


def _providers(rule: Rule) -> list[str]:
    """The agent providers a rule's runs call (its session's, or its agent steps'), once each."""
    execution = rule.execution
    names: list[str] = [execution.provider] if execution.kind == "agent-session" else []
    names += [step.provider for step in execution.actions if step.type == "agent-session"]
    return list(dict.fromkeys(names))


Check = Callable[[Any, LiveState], tuple[str | None, str | None]]


def _schedule(_trigger: ScheduleTrigger, state: LiveState) -> tuple[str | None, str | None]:
    beats = state.alive(BEAT)
    if not beats:
        return None, NO_BEAT
    more = f" (and {len(beats) - 1} more)" if len(beats) > 1 else ""
    return f"beat {beats[0].process_id}{more}", None


def _manual(_trigger: ManualTrigger, _state: LiveState) -> tuple[str | None, str | None]:
    return "manual run (API, CLI)", None


def _webhook(trigger: WebhookTrigger, state: LiveState) -> tuple[str | None, str | None]:
    if trigger.hook in state.hooks:
        return f"POST /api/v1/webhooks/{trigger.hook}", None
    return None, (
        f"custom webhook {trigger.hook!r} is not configured: deliveries to "
        f"POST /api/v1/webhooks/{trigger.hook} are refused (404); configure it with "
        f"ADE_HOOKS__{trigger.hook}='{{\"scheme\": ...}}'"
    )


def _github(trigger: GithubTrigger, state: LiveState) -> tuple[str | None, str | None]:
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


def _local(trigger: GitTrigger | FileTrigger, _state: LiveState) -> tuple[str | None, str | None]:
    if trigger.type == "git.push":
        return "GitHub push webhooks or local events (`ade-tasks emit`, its git hooks)", None
    if trigger.type == "file.changed":
        return "local events (`ade-tasks watch`, `ade-tasks emit`)", None
    return "local events (`ade-tasks emit`, the git hooks it installs)", None


def _lane(trigger: LaneTrigger, state: LiveState) -> tuple[str | None, str | None]:
    if trigger.type == "lane.merged":  # a merged pull request from the lane's branch
        return _github(GithubTrigger(type="github.pr_merged"), state)
    return "lane events of runs (the engine's own)", None


def _run_finished(trigger: RunFinishedTrigger, state: LiveState) -> tuple[str | None, str | None]:
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


#: One check per trigger model; a new trigger type adds its check here.
_CHECKS: dict[type, Check] = {
    ScheduleTrigger: _schedule,
    ManualTrigger: _manual,
    WebhookTrigger: _webhook,
    GithubTrigger: _github,
    GitTrigger: _local,
    FileTrigger: _local,
    LaneTrigger: _lane,
    RunFinishedTrigger: _run_finished,
}
