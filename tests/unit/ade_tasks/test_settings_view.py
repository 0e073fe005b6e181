"""The settings view `ade-tasks settings` and `GET /api/v1/cluster/view` show: what differs
from the defaults, by `ADE_*` name, and never a secret or a password."""

from __future__ import annotations

from pathlib import Path

from pydantic import SecretStr

from ade_tasks.settings import ProviderSettings, Settings
from ade_tasks.settings_view import SECRET, settings_view


def test_the_view_names_what_is_set_and_hides_secrets_and_passwords() -> None:
    settings = Settings(
        database_url="postgresql+psycopg://ade:s3cret@db.internal/ade",
        broker_url="redis://:hunter2@redis:6379/0",
        projects={"api": Path("/srv/api")},
        providers={"openai": ProviderSettings(api_key=SecretStr("sk-live"), base_url="http://x")},
        api_token=SecretStr("tok"),
    )
    view = settings_view(settings)
    assert view == {
        "ADE_API_TOKEN": SECRET,
        "ADE_BROKER_URL": "redis://:***@redis:6379/0",
        "ADE_DATABASE_URL": "postgresql+psycopg://ade:***@db.internal/ade",
        "ADE_PROJECTS__API": "/srv/api",
        "ADE_PROVIDERS__OPENAI__API_KEY": SECRET,
        "ADE_PROVIDERS__OPENAI__BASE_URL": "http://x",
    }
    shown = repr(view)
    assert not any(secret in shown for secret in ("s3cret", "hunter2", "sk-live", "tok'"))


def test_defaults_are_left_out() -> None:
    assert settings_view(Settings()) == {}
