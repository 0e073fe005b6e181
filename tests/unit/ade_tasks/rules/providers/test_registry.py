"""The agent provider registry is the one list of providers: every provider it holds has what
runs it on the workers, the rule models accept exactly its names, and the docs list them."""

from __future__ import annotations

import re
from pathlib import Path

from ade_tasks.rules.agent import AgentSession
from ade_tasks.rules.providers.registry import PROVIDERS
from ade_workers.agents.cli.cli_session import CLI_DRIVERS
from ade_workers.agents.cli.facts import CLI_FACTS
from ade_workers.agents.providers.registry import HTTP_PROVIDERS

DOCS = Path(__file__).resolve().parents[5] / "docs" / "agents.md"


def test_every_provider_is_run_by_exactly_one_engine_that_declares_it() -> None:
    http, cli = set(HTTP_PROVIDERS), set(CLI_DRIVERS)

    assert http | cli == set(PROVIDERS) and not http & cli
    assert all(adapter.PROVIDER is PROVIDERS[name] for name, adapter in HTTP_PROVIDERS.items())
    assert {name: driver.facts for name, driver in CLI_DRIVERS.items()} == CLI_FACTS
    assert all(facts.provider is PROVIDERS[name] for name, facts in CLI_FACTS.items())


def test_the_rule_schema_offers_the_registered_names_in_order() -> None:
    schema = AgentSession.model_json_schema()

    assert schema["properties"]["provider"] == {
        "enum": list(PROVIDERS),
        "title": "Provider",
        "type": "string",
    }


def test_the_docs_list_the_registered_providers_in_order() -> None:
    opening = DOCS.read_text().split("\n\n")[1:3]
    listed = re.findall(r"^\* `([a-z0-9-]+)`:", "\n".join(opening), re.MULTILINE)

    assert listed == list(PROVIDERS)
