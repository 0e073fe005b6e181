"""A CLI agent is one module plus one registration line: the toy `toy-cli`
(`tests/unit/extensions/toys/cli_agent.py`), registered with `cli_session.register(DRIVER)`,
validates in a rule, is found by the session that runs it, and reports its readiness like the
built-in claude-code and codex; unregistered, rules refuse it again."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest

from ade_tasks.rules.loader import parse_rule
from ade_tasks.rules.providers.registry import PROVIDERS
from ade_tasks.rules.rule import Rule
from ade_workers.agents.cli import cli_session
from ade_workers.agents.cli.facts import CLI_FACTS, CliFacts
from ade_workers.agents.readiness import providers_report
from tests.unit.extensions.toys.cli_agent import DRIVER, PROVIDER

RULE = {
    "id": "toy-cli-review",
    "triggers": [{"type": "manual"}],
    "execution": {"kind": "agent-session", "provider": "toy-cli", "model": "toy-1", "prompt": "x"},
}


@pytest.fixture
def toy_cli() -> Iterator[None]:
    cli_session.register(DRIVER)  # the registration: one line
    yield
    cli_session.unregister(DRIVER)


@pytest.mark.usefixtures("toy_cli")
def test_a_rule_naming_the_toy_cli_validates_and_its_session_finds_the_driver() -> None:
    rule = parse_rule(RULE, "config/rules/toy.yaml")

    assert isinstance(rule, Rule), rule
    assert PROVIDERS["toy-cli"] is PROVIDER and CLI_FACTS["toy-cli"] is DRIVER.facts
    assert cli_session.cli_driver("toy-cli") is DRIVER


@pytest.mark.usefixtures("toy_cli")
def test_the_toy_cli_reports_what_it_needs_until_it_is_installed_and_keyed() -> None:
    missing = {s.name: s for s in providers_report({}, which=lambda *_a, **_k: None)}
    ready = {
        s.name: s
        for s in providers_report(
            {"ADE_PROVIDERS__TOY_CLI__API_KEY": "k"},
            which=lambda *_a, **_k: "/opt/bin/toy-cli",
            run_version=lambda _path: "toy-cli 1.0",
        )
    }

    assert not missing["toy-cli"].ready
    assert missing["toy-cli"].fixes == (
        "pip install toy-cli",
        "export ADE_PROVIDERS__TOY_CLI__API_KEY=... (it reaches only the engine's proxy)",
    )
    assert ready["toy-cli"].ready and ready["toy-cli"].version == "toy-cli 1.0"


def test_unregistered_the_toy_cli_is_refused_and_a_second_driver_of_a_name_too() -> None:
    problems = parse_rule(RULE, "config/rules/toy.yaml")

    assert isinstance(problems, list)
    assert "toy-cli" not in PROVIDERS and "toy-cli" not in cli_session.CLI_DRIVERS
    shadow = CliFacts(PROVIDERS["codex"], "codex2", "http://x.invalid", "install", "m")
    with pytest.raises(ValueError, match="CLI agent 'codex' has a driver already"):
        cli_session.register(replace(DRIVER, facts=shadow))
