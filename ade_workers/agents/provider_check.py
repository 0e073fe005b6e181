"""`ade-tasks providers --check`: one real, cheap call per configured provider, to prove the
engine's settings log in before a rule depends on them.

- `claude-code`, `codex`: one headless session exactly as a rule runs it (the engine's proxy
  holding the key, the private home, no tools, plan mode), asked to answer "ok". This checks the
  binary, the key, the base URL and the model name in one go.
- `openai`, `anthropic`: `GET <base_url>/models` with the key (no tokens spent).

Each check has a deadline and says what failed: the provider's own error message when it
answered, or what could not be reached.
"""

from __future__ import annotations

import os
import tempfile
import time
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

from ade_tasks.agents.policy import Policy
from ade_tasks.rules.agent import AgentSession
from ade_tasks.secrets import Masker
from ade_tasks.settings import Settings
from ade_workers.agents.cli.cli_session import CLI_DRIVERS, run_cli_session
from ade_workers.agents.cli.setup import CliSetup
from ade_workers.agents.http_session import NO_DECISIONS, SessionLimits
from ade_workers.agents.providers.registry import HTTP_PROVIDERS, http_provider

CHECK_TIMEOUT = 60.0
CHECK_PROMPT = "This is a connection check. Reply with the single word: ok"


@dataclass(frozen=True)
class CheckResult:
    """How one provider's check went."""

    name: str
    ok: bool
    detail: str
    seconds: float


def check_provider(
    name: str, settings: Settings, *, model: str | None = None, timeout: float = CHECK_TIMEOUT
) -> CheckResult:
    """Make the one real call that tells whether `name` works with these settings."""
    started = time.monotonic()
    driver = CLI_DRIVERS.get(name)
    if driver is not None:
        ok, detail = _check_cli(name, settings, model or driver.facts.check_model, timeout)
    elif name in HTTP_PROVIDERS:
        ok, detail = _check_http(name, settings, timeout)
    else:
        ok, detail = False, f"no check for provider {name!r}"
    return CheckResult(name, ok, detail, time.monotonic() - started)


def _check_cli(name: str, settings: Settings, model: str, timeout: float) -> tuple[bool, str]:
    provider = settings.provider(name)
    binary = (provider.binary if provider else None) or CLI_DRIVERS[name].facts.binary
    execution = AgentSession(
        provider=name,
        model=model,
        prompt=CHECK_PROMPT,
        permission_mode="plan",
        tool_palette=[],
    )
    deadline = time.monotonic() + timeout
    with tempfile.TemporaryDirectory(prefix="ade-check-") as scratch:
        setup = CliSetup(
            binary=binary,
            worktree=Path(scratch),
            env={"PATH": os.environ.get("PATH", os.defpath)},
            limits=SessionLimits(max_turns=1, max_tokens=None, deadline=deadline),
            policy=Policy(mode="plan"),
            tools=[],
            tainted=False,
            decisions=NO_DECISIONS,
            protected=None,
            provider=provider,
            masker=Masker.none(),
            record=lambda *_: None,  # a check keeps no transcript
        )
        ran = run_cli_session(
            execution,
            setup,
            prompt=CHECK_PROMPT,
            system=None,
            deadline=deadline,
            should_stop=lambda: False,
            kill_grace=1.0,
        )
    outcome = ran.outcome
    if outcome.status == "completed":
        return (
            True,
            f"model {model} answered ({outcome.input_tokens + outcome.output_tokens} tokens)",
        )
    if outcome.status == "timed_out":
        return False, f"no answer within {timeout:g}s (is the base URL reachable?)"
    return False, outcome.error or outcome.status


def _check_http(name: str, settings: Settings, timeout: float) -> tuple[bool, str]:
    provider = settings.provider(name)
    if not (provider and provider.api_key and provider.api_key.get_secret_value()):
        return False, f"no key: set ADE_PROVIDERS__{name.upper()}__API_KEY"
    with closing(http_provider(name, settings)) as adapter:
        return adapter.check_key(timeout)
