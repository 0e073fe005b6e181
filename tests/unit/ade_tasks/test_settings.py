"""Settings come from ADE_* variables, nested with `__`; defaults are the embedded mode."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from ade_tasks.errors import NotFoundError
from ade_tasks.settings import Settings


def test_defaults_are_the_embedded_mode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    settings = Settings()
    assert settings.embedded and settings.broker_url.startswith("memory://")
    assert settings.effective_database_url == f"sqlite:///{tmp_path / '.ade' / 'ade.db'}"
    assert settings.project_root("default") == tmp_path
    assert settings.effective_api_url == "http://127.0.0.1:8787"


def test_environment_switches_to_the_cluster(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ADE_DATABASE_URL", "postgresql://ade@db/ade")
    monkeypatch.setenv("ADE_BROKER_URL", "redis://redis:6379/0")
    monkeypatch.setenv("ADE_PROJECTS__API", str(tmp_path))
    monkeypatch.setenv("ADE_PROVIDERS__OPENAI__BASE_URL", "http://127.0.0.1:9999/v1")
    monkeypatch.setenv("ADE_GITHUB__WEBHOOK_SECRET", "s3cret")
    settings = Settings()
    assert not settings.embedded
    assert settings.project_root("api") == tmp_path
    assert settings.providers["openai"].base_url == "http://127.0.0.1:9999/v1"
    assert settings.github.webhook_secret is not None
    assert "s3cret" not in repr(settings)


def test_unknown_project_names_the_setting_to_add() -> None:
    with pytest.raises(NotFoundError, match="ADE_PROJECTS__WEB=/path/to/repository"):
        Settings().project_root("web")


@pytest.mark.parametrize("name", ["ADE_DATABASE_URL", "ADE_BROKER_URL"])
def test_placeholder_passwords_are_refused(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    monkeypatch.setenv(name, "scheme://ade:CHANGE_ME@host/ade")
    with pytest.raises(ValidationError, match=f"{name} still holds the CHANGE_ME placeholder"):
        Settings()


def test_a_placeholder_github_secret_is_refused() -> None:
    with pytest.raises(
        ValidationError, match="ADE_GITHUB__WEBHOOK_SECRET still holds the CHANGE_ME"
    ):
        Settings(github={"webhook_secret": "CHANGE_ME"})


def test_cli_providers_and_model_prices_come_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ADE_PROVIDERS__CLAUDE_CODE__BINARY", "/opt/claude/bin/claude")
    prices = '{"gpt-4.1": {"input_usd_per_mtok": 2, "output_usd_per_mtok": 8}}'
    monkeypatch.setenv("ADE_MODEL_PRICES", prices)

    settings = Settings()

    configured = settings.provider("claude-code")
    assert configured is not None and configured.binary == "/opt/claude/bin/claude"
    assert settings.provider("codex") is None
    assert settings.model_prices["gpt-4.1"].cost(1_000_000, 500_000) == 6.0


def test_a_negative_model_price_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        "ADE_MODEL_PRICES", '{"m": {"input_usd_per_mtok": -1, "output_usd_per_mtok": 1}}'
    )
    with pytest.raises(ValidationError, match="input_usd_per_mtok"):
        Settings()


@pytest.mark.parametrize(
    ("env", "polls"),
    [
        ({}, True),  # no secret: webhooks are refused, polling is the only way in
        ({"ADE_GITHUB__WEBHOOK_SECRET": "s3cret"}, False),  # webhooks arrive: no double runs
        ({"ADE_GITHUB__WEBHOOK_SECRET": "s3cret", "ADE_GITHUB__POLL_REPOS": '["a/b"]'}, True),
        ({"ADE_GITHUB__POLL": "off"}, False),
        ({"ADE_GITHUB__WEBHOOK_SECRET": "s3cret", "ADE_GITHUB__POLL": "on"}, True),
    ],
)
def test_beats_poll_github_unless_webhooks_arrive(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], polls: bool
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)

    github = Settings().github

    assert github.polls_in_beats is polls
    assert github.poll_interval_seconds == 30


def test_a_poll_interval_below_a_second_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ADE_GITHUB__POLL_INTERVAL_SECONDS", "0.5")

    with pytest.raises(ValidationError, match="poll_interval_seconds"):
        Settings()
