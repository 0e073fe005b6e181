"""A toy CLI agent: `toy-cli`, a binary the engine would run headless, declared in one module
(its provider, its facts and its driver); `tests/unit/extensions/test_toy_cli_agent.py`
registers it with one line."""

from __future__ import annotations

from ade_tasks.rules.providers.declaration import AgentProvider
from ade_workers.agents.cli.facts import CapabilityReport, CliFacts
from ade_workers.agents.cli.outcome import CliDriver, CliRun, CliSessionOutcome

PROVIDER = AgentProvider("toy-cli", without_engine_tools="(it has its own): use provider openai")
FACTS = CliFacts(PROVIDER, "toy-cli", "http://toy.invalid/v1", "pip install toy-cli", "toy-1")


def run(cli: CliRun) -> CliSessionOutcome:
    """Not installed anywhere: the engine reports a missing CLI as it would a real one's."""
    raise FileNotFoundError(FACTS.binary)


DRIVER = CliDriver(
    FACTS,
    capabilities=lambda _setup, _session: CapabilityReport(FACTS.name, ()),
    refusal=lambda _setup, _session: None,
    run=run,
)
