"""One headless session of a CLI agent provider (`claude-code`, `codex`), bounded by the engine.

`run_cli_session` runs the session through the CLI's driver (`CLI_DRIVERS`: `claude_driver`,
`codex_driver`; the engine decides every tool call, holds the key, meters the budget, contains the
processes) and turns what the CLI did into the same run events and `SessionOutcome` the HTTP
tool loop gives. Adding a CLI agent: its driver module (a `CliDriver` whose `CliFacts` point at
its `AgentProvider` declaration) and one line, `register(DRIVER)`, which also lets rules name the
provider (`ade_tasks.rules.providers.registry`) and readiness report it (`facts.CLI_FACTS`). The
built-in ones register the same way below; their declarations and facts are listed where they
are read without the drivers (rule validation, `ade-tasks providers`, the API's rule health),
which is why `PROVIDERS` and `CLI_FACTS` name them too.

Choices, in order of what happens:

- The capability report (what the engine enforces on this CLI, aspect by aspect, and how) is
  recorded as `agent.capabilities` before the CLI starts; Claude's is recorded again once its
  init event told which tools and MCP servers it really had (`checked_against: init`).
- A redelivered or answered run starts a fresh CLI session: the CLI's transcript lived in the
  session's private config home. The repeated call meets the operator's answer (`call_id`).
- The prompt ends with an instruction to finish with a fenced ```json block
  `{"summary", "findings", "confidence"}`; `parse_report` reads it leniently from the final
  message (no block or a broken one: the whole final message is the summary, no findings;
  invalid findings are dropped and listed in an `agent.report_note` event).
- Codex has no system prompt: the `system` text is put before the prompt instead, under an
  "Instructions" heading.
- How each CLI's output becomes events is its driver's (`claude_driver`: Claude's stream-json,
  parsed once the process has ended; the engine's decisions are recorded live as
  `agent.tool_decision`).
- Secrets (the engine's, the provider key, the session token) are masked before anything is
  parsed or recorded.

The return value is a `CliSessionOutcome`: the `SessionOutcome` plus the session's cost in USD
as the CLI reports it (claude does; codex does not) and the capability report.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from ade_tasks.errors import AdeError, not_registered
from ade_tasks.rules.agent import AgentSession
from ade_tasks.rules.providers import registry as rule_providers
from ade_workers.agents.cli import claude_driver, codex_driver
from ade_workers.agents.cli.facts import CLI_FACTS, CliFacts
from ade_workers.agents.cli.outcome import (
    REPORT_INSTRUCTION,
    CliDriver,
    CliRun,
    CliSessionOutcome,
)
from ade_workers.agents.cli.setup import CliSetup
from ade_workers.agents.http_session import SessionOutcome, SessionStatus
from ade_workers.agents.providers.registry import CHECK_PROVIDER

CLI_DRIVERS: dict[str, CliDriver] = {}


def register(driver: CliDriver) -> None:
    """Let rules name the driver's provider, readiness report it and sessions run on it;
    ValueError if another driver has its name."""
    name = driver.facts.name
    if CLI_DRIVERS.get(name, driver) is not driver:
        raise ValueError(f"CLI agent {name!r} has a driver already")
    rule_providers.register(driver.facts.provider)
    CLI_FACTS[name] = driver.facts
    CLI_DRIVERS[name] = driver


def unregister(driver: CliDriver) -> None:
    """Rules may no longer name the driver's provider, nor sessions run on it."""
    name = driver.facts.name
    if CLI_DRIVERS.get(name) is driver:
        del CLI_DRIVERS[name]
        del CLI_FACTS[name]
    rule_providers.unregister(driver.facts.provider)


register(claude_driver.DRIVER)
register(codex_driver.DRIVER)


def cli_driver(provider: str) -> CliDriver:
    """The driver of CLI agent `provider`; NotFoundError naming the known ones otherwise."""
    driver = CLI_DRIVERS.get(provider)
    if driver is None:
        raise not_registered("a CLI agent", provider, CLI_DRIVERS, CHECK_PROVIDER)
    return driver


def session_prompt(facts: CliFacts, prompt: str, system: str | None) -> str:
    """The prompt the CLI gets: the rule's prompt, the report instruction, and (for a CLI with
    no system prompt flag, such as codex) the system text in front."""
    text = f"{prompt.rstrip()}\n\n{REPORT_INSTRUCTION}"
    if facts.system_in_prompt and system:
        text = f"Instructions:\n{system.strip()}\n\nTask:\n{text}"
    return text


def run_cli_session(
    execution: AgentSession,
    setup: CliSetup,
    *,
    prompt: str,
    system: str | None,
    deadline: float,
    should_stop: Callable[[], bool],
    kill_grace: float,
) -> CliSessionOutcome:
    """Run one headless session of the CLI `execution.provider` names, bounded by the engine."""
    driver = cli_driver(execution.provider)
    cli, record = driver.facts.name, setup.record
    capabilities = driver.capabilities(setup, execution).as_dict()
    record("agent.capabilities", capabilities)

    def ended(status: SessionStatus, error: str) -> CliSessionOutcome:
        outcome = SessionOutcome(status, "", [], None, 0, 0, 0, error, None)
        return CliSessionOutcome(outcome, None, capabilities)

    if deadline - time.monotonic() <= 0:
        return ended("timed_out", f"the session's deadline passed before {cli} started")
    if should_stop():
        return ended("failed", f"{cli} was cancelled before it started")
    text = session_prompt(driver.facts, prompt, system)
    call = CliRun(
        execution, setup, text, system, deadline, should_stop, kill_grace, capabilities, record
    )
    try:
        refused = driver.refusal(setup, execution)
        if refused is not None:
            return ended("failed", refused)
        return driver.run(call)
    except FileNotFoundError:
        return ended("failed", _not_installed(driver.facts, setup.binary))
    except AdeError as exc:  # the agent user cannot reach what the session needs
        return ended("failed", exc.message)
    except OSError as exc:
        return ended("failed", f"{cli} could not be started (`{setup.binary}`): {exc}")


def _not_installed(facts: CliFacts, binary: str) -> str:
    where = "not found" if "/" in binary else "not found on PATH"
    return (
        f"{facts.name} is not installed: `{binary}` {where}; install it ({facts.install}) "
        f"or set {facts.prefix}BINARY to its path"
    )
