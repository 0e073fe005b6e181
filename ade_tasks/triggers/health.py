"""Rule health: can this rule fire, and by which path? If not, what is wrong and what to do.

`rule_health(rule, state)` is a pure function of a rule and a `LiveState` snapshot (what the
settings configure and which beats and pollers are alive, `ade_tasks.db.heartbeats`); the API
builds the snapshot (`ade_api.http.health_state`). Per trigger it answers `ready` with the path that
will fire it, or the setup error in words, as its kind's readiness check
(`ade_tasks.triggers.readiness`, named by the kind's declaration) says:

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
a project that is not configured, a guardrail that holds its runs now (each registered
guardrail's `health` check says; the built-in ones have none). A rule is `ready` when it has
no such problem and every trigger is ready. Whether it is enabled is its own state, not part of
its health.

A pause (`ade_tasks.db.pauses`) holds triggers: a paused trigger, and every automatic trigger
of a paused rule, is not ready, its error the pause's note with who paused it and since when
(`paused` marks it; its `path` still says what fires it once resumed). A manual trigger is never
paused, so a paused rule whose only trigger is manual stays ready.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from ade_tasks.db.heartbeats import Heartbeat
from ade_tasks.db.pauses import Pause, holding
from ade_tasks.guardrails import registry as guardrails
from ade_tasks.json_document import JsonObject
from ade_tasks.rules.rule import Rule
from ade_tasks.rules.schedules import rule_schedules
from ade_tasks.rules.steps import AgentSessionStep
from ade_tasks.triggers.registry import readiness_check


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

    def as_dict(self) -> JsonObject:
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

    def as_dict(self) -> JsonObject:
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
            path, error = readiness_check(type(trigger))(trigger, state)
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
    return [*problems, *guardrails.problems(rule, state)]


def _providers(rule: Rule) -> list[str]:
    """The agent providers a rule's runs call (its session's, or its agent steps'), once each."""
    execution = rule.execution
    names: list[str] = [execution.provider] if execution.kind == "agent-session" else []
    names += [step.provider for step in execution.actions if isinstance(step, AgentSessionStep)]
    return list(dict.fromkeys(names))
