"""Rule health (issue 16, finding 2): for a rule and a snapshot of the live state, each
trigger's delivery path or the setup error in words, and what stops the whole rule."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import SecretStr

from ade_api.http.health_state import provider_readiness
from ade_tasks.db.heartbeats import BEAT, POLLER, Heartbeat, PollOutcome
from ade_tasks.db.pauses import Pause
from ade_tasks.rules.loader import parse_rule
from ade_tasks.rules.rule import Rule
from ade_tasks.settings import ProviderSettings, Settings
from ade_tasks.triggers.health import (
    LiveState,
    ProviderReadiness,
    Untrusted,
    rule_health,
)
from ade_tasks.triggers.readiness import GITHUB_REFUSED, NO_BEAT

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
BUILTIN = {"kind": "built-in", "actions": [{"type": "run-command", "command": "true"}]}
AGENT = {"kind": "agent-session", "provider": "openai", "model": "gpt-4.1", "prompt": "review"}


def rule(*triggers: dict[str, Any], execution: dict[str, Any] | None = None) -> Rule:
    parsed = parse_rule(
        {"id": "r", "triggers": list(triggers), "execution": execution or BUILTIN}, "test"
    )
    assert isinstance(parsed, Rule), parsed
    return parsed


def beat(seen: timedelta = timedelta(0), kind: str = BEAT, **kw: Any) -> Heartbeat:
    return Heartbeat(f"{kind}-1", kind, NOW - seen, 10.0, **kw)


def test_a_github_rule_without_the_secret_and_without_a_poller_cannot_fire() -> None:
    # given a github.* rule, no ADE_GITHUB__WEBHOOK_SECRET and no poller alive
    health = rule_health(rule({"type": "github.pr_opened", "repo": "acme/api"}), LiveState(NOW))

    # then its trigger says that deliveries are refused, and what to do
    assert not health.ready
    (trigger,) = health.triggers
    assert (trigger.ready, trigger.path) == (False, None)
    assert trigger.error == (
        "GitHub deliveries are refused: ADE_GITHUB__WEBHOOK_SECRET is not set; "
        "set it or run `ade-tasks poll github`"
    )
    assert health.errors == [f"triggers.0 (github.pr_opened): {GITHUB_REFUSED}"]


def test_a_github_rule_fires_through_the_webhook_once_the_secret_is_set() -> None:
    health = rule_health(rule({"type": "github.pr_opened"}), LiveState(NOW, github_secret=True))

    assert health.ready
    assert health.triggers[0].path == "GitHub webhook (POST /api/v1/webhooks/github)"


def test_a_live_poller_of_the_trigger_repository_fires_a_github_rule_without_the_secret() -> None:
    state = LiveState(NOW, heartbeats=(beat(kind=POLLER, repos=("acme/api",)),))

    health = rule_health(rule({"type": "github.pr_opened", "repo": "Acme/API"}), state)

    assert health.ready
    assert health.triggers[0].path == "poller poller-1 (acme/api)"


def test_a_poller_that_stopped_beating_fires_nothing() -> None:
    # given a poller last seen well beyond its 10 s interval and the grace
    state = LiveState(NOW, heartbeats=(beat(timedelta(minutes=5), kind=POLLER),))

    health = rule_health(rule({"type": "github.pr_opened", "repo": "acme/api"}), state)

    assert health.triggers[0].error == GITHUB_REFUSED


def test_a_poller_cannot_fire_event_types_polling_cannot_see() -> None:
    state = LiveState(NOW, heartbeats=(beat(kind=POLLER),))

    health = rule_health(rule({"type": "github.pr_review_submitted", "repo": "acme/api"}), state)
    labeled = rule_health(rule({"type": "github.issue_labeled", "repo": "acme/api"}), state)

    error = health.triggers[0].error
    assert error is not None and "polling cannot see github.pr_review_submitted events" in error
    # labels come from the issue events API, so a poller fires labeled triggers
    assert labeled.triggers[0].error is None


def test_the_new_github_triggers_are_ready_by_webhook_and_github_event_not_by_polling() -> None:
    polled = LiveState(NOW, heartbeats=(beat(kind=POLLER),))
    signed = LiveState(NOW, github_secret=True)
    suite = {"type": "github.event", "event": "check_suite", "repo": "acme/api"}
    labeled = {"type": "github.pr_labeled", "label": "agent-fix", "repo": "acme/api"}

    by_poller = rule_health(rule(suite, labeled), polled)
    by_webhook = rule_health(rule(suite, labeled), signed)

    error = by_poller.triggers[0].error
    assert error is not None and "polling cannot see github.event (check_suite) events" in error
    assert by_poller.triggers[1].path == "poller poller-1 (repositories of enabled rules)"
    assert by_webhook.ready and by_webhook.triggers[0].path is not None


def test_a_poller_of_other_repositories_does_not_fire_the_trigger() -> None:
    state = LiveState(NOW, heartbeats=(beat(kind=POLLER, repos=("acme/web",)),))

    health = rule_health(rule({"type": "github.pr_opened", "repo": "acme/api"}), state)

    error = health.triggers[0].error
    assert error is not None and "no running poller polls acme/api" in error
    assert "`ade-tasks poll github --repos acme/api`" in error


def test_a_custom_webhook_rule_naming_a_hook_that_is_not_configured_cannot_fire() -> None:
    health = rule_health(rule({"type": "webhook", "hook": "deploys"}), LiveState(NOW))

    assert not health.ready
    assert health.triggers[0].error == (
        "custom webhook 'deploys' is not configured: deliveries to POST /api/v1/webhooks/deploys "
        "are refused (404); configure it with ADE_HOOKS__deploys='{\"scheme\": ...}'"
    )
    configured = rule_health(
        rule({"type": "webhook", "hook": "deploys"}), LiveState(NOW, hooks=frozenset({"deploys"}))
    )
    assert configured.ready and configured.triggers[0].path == "POST /api/v1/webhooks/deploys"


def test_an_agent_rule_naming_a_provider_that_is_not_set_up_cannot_fire() -> None:
    missing = ProviderReadiness(False, ("export ADE_PROVIDERS__OPENAI__API_KEY=...",))
    state = LiveState(NOW, providers={"openai": missing})

    health = rule_health(rule({"type": "manual"}, execution=AGENT), state)

    # then the rule (all of it, manual runs too) cannot run, and the fix is named
    assert not health.ready
    assert health.triggers[0].ready
    assert health.problems == (
        "agent provider 'openai' is not set up: export ADE_PROVIDERS__OPENAI__API_KEY=...",
    )
    ready = LiveState(NOW, providers={"openai": ProviderReadiness(True)})
    assert rule_health(rule({"type": "manual"}, execution=AGENT), ready).ready


def test_an_agent_step_of_a_chain_needs_its_provider_too() -> None:
    step = {"type": "agent-session", "provider": "anthropic", "model": "m", "prompt": "p"}
    chain = {"kind": "built-in", "actions": [{"type": "run-command", "command": "true"}, step]}

    health = rule_health(rule({"type": "manual"}, execution=chain), LiveState(NOW))

    assert health.problems == ("agent provider 'anthropic' is not set up: no such provider",)


def test_an_untrusted_shared_rule_cannot_fire_until_trusted() -> None:
    untrusted = Untrusted("shared/team.yaml", "ab" * 32)

    health = rule_health(rule({"type": "manual"}), LiveState(NOW), untrusted)

    assert not health.ready
    assert health.problems == (
        "untrusted shared config shared/team.yaml: no trigger runs it until it is trusted; "
        f"review it, then `ade-tasks rules trust {'ab' * 32}`",
    )


def test_a_schedule_fires_only_while_a_beat_is_alive() -> None:
    schedule = rule({"type": "schedule", "cron": "0 3 * * *"})

    gone = rule_health(schedule, LiveState(NOW, heartbeats=(beat(timedelta(minutes=2)),)))
    alive = rule_health(schedule, LiveState(NOW, heartbeats=(beat(timedelta(seconds=5)),)))

    assert gone.triggers[0].error == NO_BEAT
    assert alive.ready and alive.triggers[0].path == "beat beat-1"


def test_a_rule_is_ready_only_when_every_trigger_is() -> None:
    # given a rule whose manual trigger is always ready and whose github trigger is not
    health = rule_health(rule({"type": "manual"}, {"type": "github.pr_opened"}), LiveState(NOW))

    assert [t.ready for t in health.triggers] == [True, False]
    assert not health.ready


def test_a_rule_targeting_an_unconfigured_project_cannot_fire() -> None:
    parsed = parse_rule(
        {"id": "r", "project": "web", "triggers": [{"type": "manual"}], "execution": BUILTIN}, "t"
    )
    assert isinstance(parsed, Rule)

    health = rule_health(parsed, LiveState(NOW))

    assert health.problems == (
        "project 'web' is not configured: set ADE_PROJECTS__WEB=/path/to/repository",
    )


def test_provider_readiness_follows_the_settings_a_run_uses_not_the_vendor_variables(
    monkeypatch: Any,
) -> None:
    # given OPENAI_API_KEY in the environment (a run never reads it) and an Anthropic key in
    # the engine's settings, and no agent CLI on PATH
    monkeypatch.setenv("OPENAI_API_KEY", "sk-vendor")
    settings = Settings(providers={"anthropic": ProviderSettings(api_key=SecretStr("k"))})

    readiness = provider_readiness(settings, which=lambda *_a, **_k: None)

    assert readiness["anthropic"] == ProviderReadiness(True, ())
    assert readiness["openai"] == ProviderReadiness(
        False, ("export ADE_PROVIDERS__OPENAI__API_KEY=...",)
    )
    assert not readiness["claude-code"].ready
    assert any("npm install" in fix for fix in readiness["claude-code"].fixes)


# --- pauses and failing pollers (issue 37, findings 2 and 3) ---------------------------------

PAUSED_AT = NOW - timedelta(hours=2)


def pause(trigger_index: int | None = None, note: str = "deploy freeze") -> Pause:
    return Pause("r", trigger_index, note, "oncall (ana)", PAUSED_AT)


def test_a_paused_rule_is_not_ready_and_each_automatic_trigger_names_the_pause() -> None:
    # given a rule whose schedule has a live beat, paused as a whole
    alive = (beat(timedelta(seconds=5)),)
    state = LiveState(NOW, heartbeats=alive, pauses={"r": [pause()]})

    health = rule_health(rule({"type": "schedule", "cron": "0 3 * * *"}, {"type": "manual"}), state)

    # then it is not ready: its schedule is held (who, since when, the note), manual runs are not
    assert not health.ready
    schedule, manual = health.triggers
    assert schedule.paused == pause() and not schedule.ready
    assert schedule.error == (
        "rule 'r' is paused by oncall (ana) since 2026-12-01 10:00 UTC: deploy freeze; "
        "resume with `ade-tasks rules resume r`"
    )
    assert schedule.path == "beat beat-1"  # what fires it once resumed
    assert manual.ready and manual.paused is None
    assert schedule.as_dict()["paused"] is True


def test_a_paused_trigger_holds_only_itself() -> None:
    alive = (beat(timedelta(seconds=5)),)
    state = LiveState(NOW, heartbeats=alive, pauses={"r": [pause(1, "flaky runner")]})
    two = rule({"type": "schedule", "cron": "0 3 * * *"}, {"type": "schedule", "cron": "0 4 * * *"})

    health = rule_health(two, state)

    assert [t.ready for t in health.triggers] == [True, False]
    error = health.triggers[1].error
    assert error is not None and error.startswith("trigger #1 of rule 'r' is paused by oncall")
    assert "flaky runner" in error and "rules resume r --trigger 1" in error


def test_a_paused_rule_with_only_a_manual_trigger_stays_ready() -> None:
    health = rule_health(rule({"type": "manual"}), LiveState(NOW, pauses={"r": [pause()]}))

    assert health.ready


def test_a_paused_trigger_that_also_cannot_fire_says_both() -> None:
    state = LiveState(NOW, pauses={"r": [pause()]})

    health = rule_health(rule({"type": "schedule", "cron": "0 3 * * *"}), state)

    error = health.triggers[0].error
    assert error is not None and error.endswith(f"; besides, {NO_BEAT}")


def poller(**polls: PollOutcome) -> Heartbeat:
    return beat(kind=POLLER, repos=("acme/api",), polls=polls)


def test_a_github_rule_is_not_ready_through_a_poller_whose_every_poll_fails() -> None:
    # given a poller of acme/api that has never polled it successfully (no token, GitHub away)
    failed = PollOutcome(None, NOW - timedelta(seconds=20), "GitHub answered 401 (Bad credentials)")
    state = LiveState(NOW, heartbeats=(poller(**{"acme/api": failed}),))

    health = rule_health(rule({"type": "github.pr_opened", "repo": "acme/api"}), state)

    # then the rule is not ready, and the message names the failure and the last success
    assert not health.ready
    assert health.triggers[0].error == (
        "GitHub deliveries are refused: ADE_GITHUB__WEBHOOK_SECRET is not set, and the polls of "
        "acme/api fail: poller poller-1 last polled acme/api at 11:59:40 UTC and failed (GitHub "
        "answered 401 (Bad credentials)); its last successful poll: never"
    )


def test_one_failed_poll_after_a_recent_success_keeps_the_poller_a_path() -> None:
    blip = PollOutcome(NOW - timedelta(minutes=1), NOW - timedelta(seconds=5), "timed out")
    stale = PollOutcome(NOW - timedelta(minutes=30), NOW - timedelta(seconds=5), "timed out")
    trigger = {"type": "github.pr_opened", "repo": "acme/api"}

    recent = rule_health(rule(trigger), LiveState(NOW, heartbeats=(poller(**{"acme/api": blip}),)))
    failing = rule_health(
        rule(trigger), LiveState(NOW, heartbeats=(poller(**{"acme/api": stale}),))
    )

    assert recent.ready
    error = failing.triggers[0].error
    assert error is not None and "its last successful poll: 2026-12-01 11:30:00 UTC" in error


def test_a_poller_that_polls_again_successfully_is_a_path_again() -> None:
    healed = PollOutcome(NOW - timedelta(seconds=5), NOW - timedelta(minutes=40), "401")

    health = rule_health(
        rule({"type": "github.pr_opened", "repo": "acme/api"}),
        LiveState(NOW, heartbeats=(poller(**{"acme/api": healed}),)),
    )

    assert health.ready and health.triggers[0].path == "poller poller-1 (acme/api)"
