"""The live state rule health is computed from, read where the API runs: its settings (the
GitHub secret, custom hooks, projects, providers), the heartbeats of beats and pollers in the
database, and whether each agent provider is set up as `ade-tasks providers` decides it.

Providers are judged from the API's settings and PATH without a network call or a `--version`
run: a deployment whose workers see other settings than its API (another key, a CLI installed
only on the workers) gets the API's view. `ade-tasks providers --check` on a worker proves a
provider for real.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from sqlalchemy.orm import Session

from ade_api.http.schemas.rules import PauseOut, RuleHealthOut, RuleOut
from ade_tasks.clock import utcnow
from ade_tasks.db import heartbeats as heartbeats_db
from ade_tasks.db import pauses as pauses_db
from ade_tasks.db import rule_edits as rule_edits_db
from ade_tasks.db import rules as rules_db
from ade_tasks.db.schema import RuleRow
from ade_tasks.errors import ConflictError
from ade_tasks.rules.providers.registry import PROVIDERS
from ade_tasks.settings import Settings
from ade_tasks.triggers.health import (
    LiveState,
    ProviderReadiness,
    RuleHealth,
    Untrusted,
    rule_health,
    unreadable,
)
from ade_workers.agents.readiness import ProviderStatus, providers_report


def live_state(
    session: Session, settings: Settings, which: Callable[..., str | None] = shutil.which
) -> LiveState:
    """A snapshot of everything rule health looks at, now."""
    return LiveState(
        now=utcnow(),
        github_secret=bool(
            settings.github.webhook_secret and settings.github.webhook_secret.get_secret_value()
        ),
        hooks=frozenset(settings.hooks),
        projects=frozenset({"default", *settings.projects}),
        providers=provider_readiness(settings, which),
        heartbeats=tuple(heartbeats_db.recent(session)),
        rules=rules_db.enabled_by_id(session),
        pauses=pauses_db.every_pause(session),
    )


def provider_readiness(
    settings: Settings, which: Callable[..., str | None] = shutil.which
) -> dict[str, ProviderReadiness]:
    """Each provider's readiness from `providers_report`, fed the settings a run uses."""
    return {
        status.name: ProviderReadiness(status.ready, status.fixes)
        for status in provider_statuses(settings, which)
    }


def provider_statuses(
    settings: Settings, which: Callable[..., str | None] = shutil.which
) -> list[ProviderStatus]:
    """`providers_report` fed the settings a run uses (its fixes name the engine's settings):
    what `ade-tasks providers` prints as the cluster's view."""
    env = {"PATH": os.environ.get("PATH", os.defpath)}
    for name, provider in PROVIDERS.items():
        configured = settings.provider(name)
        prefix = provider.settings_prefix
        if configured is not None and configured.api_key is not None:
            env[prefix + "API_KEY"] = "set"  # presence only: no secret leaves the settings
        if configured is not None and configured.base_url:
            env[prefix + "BASE_URL"] = configured.base_url
        if configured is not None and configured.binary:
            env[prefix + "BINARY"] = configured.binary
    report = providers_report(env, which=which, run_version=lambda _: None, home=Path.home())
    return [replace(status, fixes=tuple(_fix(f) for f in status.fixes)) for status in report]


def _fix(fix: str) -> str:
    # `providers` offers the vendor's own variable first (OPENAI_API_KEY); a run reads only
    # the engine's settings, so name ADE_PROVIDERS__<NAME>__API_KEY.
    _, _, engine_name = fix.partition(" (or ")
    if engine_name.startswith("ADE_PROVIDERS__"):
        return f"export {engine_name.rstrip(')')}=..."
    return fix


def health_of(row: RuleRow, state: LiveState) -> RuleHealth:
    """One stored rule's health (a document that cannot be read is its problem)."""
    try:
        rule = rules_db.load_rule(row)
    except Exception as exc:
        return unreadable(row.id, f"{type(exc).__name__}: {exc}")
    untrusted = (
        Untrusted(row.source_file, row.source_hash) if row.trust_state != "trusted" else None
    )
    return rule_health(rule, state, untrusted)


def health_out(row: RuleRow, state: LiveState) -> RuleHealthOut:
    """One stored rule's health, as the API answers it."""
    return RuleHealthOut.model_validate(health_of(row, state).as_dict())


def rule_out(row: RuleRow, state: LiveState) -> RuleOut:
    """A stored rule as the API answers it, with its pauses and its health."""
    pauses = [pause_out(found) for found in state.pauses.get(row.id, ())]
    return RuleOut.model_validate(row).model_copy(
        update={"health": health_out(row, state), "pauses": pauses}
    )


def pause_out(found: pauses_db.Pause, message: str | None = None) -> PauseOut:
    """A pause as the API answers it; `message` defaults to its reason (what a skip records)."""
    return PauseOut(
        rule_id=found.rule_id,
        trigger_index=found.trigger_index,
        note=found.note,
        paused_by=found.paused_by,
        paused_at=found.paused_at,
        message=found.reason if message is None else message,
    )


def refuse_unready(row: RuleRow, state: LiveState, *, force: bool) -> None:
    """Refuse to enable a rule that cannot fire (409, saying why), unless `force`. A pause is
    not a reason: enabling a paused rule keeps it paused, as the operator left it."""
    health = health_of(row, replace(state, pauses={}))
    if health.ready or force:
        return
    raise ConflictError(
        f"rule {row.id!r} cannot fire: {'; '.join(health.errors)}. Fix that and enable it "
        f"again, or enable it anyway with ?force=true (`ade-tasks rules enable {row.id} --force`)"
    )


def set_enabled(
    session: Session, settings: Settings, rule_id: str, enabled: bool, *, force: bool
) -> tuple[RuleRow, LiveState]:
    """Enable or disable a rule (the API's and the web page's buttons); enabling one that
    cannot fire is refused with its setup errors unless `force`. Returns the row and the live
    state it was judged by."""
    state = live_state(session, settings)
    if enabled:
        refuse_unready(rules_db.get_rule(session, rule_id), state, force=force)
    row, _ = rule_edits_db.set_enabled(session, rule_id, enabled)
    return row, state
