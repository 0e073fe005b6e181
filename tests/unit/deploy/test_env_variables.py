"""Every environment variable a deploy file sets is a real setting (or one of a few named
others, each with its reason), and every value it sets is valid for that setting.
"""

from __future__ import annotations

import os
import re
import types
from typing import Any, Union, get_args, get_origin

import pytest
from pydantic import BaseModel

from ade_tasks.settings import Settings
from tests.unit.deploy.deploy_files import all_env_groups

# Variables the deploy files may set that are not ADE settings, each with its reason. Anything
# else that does not start with ADE_ must be a real setting (see `is_setting`).
ALLOWED_OTHER_ENV = {
    "POSTGRES_USER": "the postgres image creates this role",
    "POSTGRES_PASSWORD": "the postgres image sets the role's password",
    "POSTGRES_DB": "the postgres image creates this database",
    "FLOWER_BASIC_AUTH": "user:password; Flower reads it from its environment, never argv",
    "PATH": "the image puts its virtualenv first",
    "PYTHONUNBUFFERED": "logs reach the container runtime / journal at once",
    "PYTHONDONTWRITEBYTECODE": "no .pyc files in the image's working directory",
    "PIP_DISABLE_PIP_VERSION_CHECK": "build stage of the image",
    "PIP_NO_CACHE_DIR": "build stage of the image",
}


# --- settings: which environment names are real ----------------------------------------------


def _unwrap_optional(annotation: Any) -> Any:
    if get_origin(annotation) in (Union, types.UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return annotation


def _model_accepts(model: type[BaseModel], parts: list[str]) -> bool:
    """Does `model` read the environment name made of `parts` (split at the nested delimiter)?"""
    names: dict[str, Any] = {}
    for name, info in model.model_fields.items():
        names[name.lower()] = info.annotation
        for alias in (info.alias, info.validation_alias):
            if isinstance(alias, str):
                names[alias.lower()] = info.annotation
    annotation = names.get(parts[0].lower())
    if annotation is None:
        return False
    if len(parts) == 1:
        return True  # the whole field (nested models and dicts take JSON)
    annotation = _unwrap_optional(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return _model_accepts(annotation, parts[1:])
    if get_origin(annotation) is dict:
        if not parts[1]:
            return False
        if len(parts) == 2:
            return True  # ADE_PROJECTS__<NAME>, ADE_HOOKS__<HOOK>
        value = _unwrap_optional(get_args(annotation)[1])
        if isinstance(value, type) and issubclass(value, BaseModel):
            return _model_accepts(value, parts[2:])
    return False


def is_setting(name: str) -> bool:
    """True when `name` is an environment variable the Settings model reads."""
    config = Settings.model_config
    prefix = str(config.get("env_prefix", ""))
    delimiter = config.get("env_nested_delimiter") or None
    case_sensitive = bool(config.get("case_sensitive", False))
    key, want = (name, prefix) if case_sensitive else (name.upper(), prefix.upper())
    for info in Settings.model_fields.values():  # an alias is read without the prefix
        for alias in (info.alias, info.validation_alias):
            if isinstance(alias, str) and alias.upper() == key.upper():
                return True
    if not key.startswith(want) or key == want:
        return False
    rest = key[len(want) :]
    parts = rest.split(delimiter) if delimiter else [rest]
    return _model_accepts(Settings, parts)


def test_setting_names_come_from_the_model() -> None:
    assert is_setting("ADE_DATABASE_URL") and is_setting("ade_broker_url")
    assert is_setting("ADE_GITHUB__TOKEN") and is_setting("ADE_GITHUB__WEBHOOK_SECRET")
    assert is_setting("ADE_PROJECTS__DEFAULT") and is_setting("ADE_HOOKS__DEPLOYS")
    assert is_setting("ADE_PROVIDERS__OPENAI__API_KEY") and is_setting("ADE_DB_POOL_SIZE")
    for wrong in (
        "ADE_DATABSE_URL",
        "ADE_GITHUB__TOKN",
        "ADE_PROVIDERS__OPENAI__KEY",
        "ADE_PROJECTS__",
        "ADE_",
        "ADE_WORKER_QUEUES",
        "DATABASE_URL",
    ):
        assert not is_setting(wrong), wrong


# --- environment variables are settings ------------------------------------------------------

PLACEHOLDER = re.compile(r"\$\{[^}]*\}|\$\([A-Za-z_][A-Za-z0-9_]*\)")


def test_every_variable_set_is_a_setting_or_allowed() -> None:
    seen = 0
    for group in all_env_groups():
        for name in group.values:
            seen += 1
            if name.upper().startswith("ADE_"):
                assert is_setting(name), f"{group.source}: {name} is not an ADE setting"
            else:
                assert name in ALLOWED_OTHER_ENV, (
                    f"{group.source}: {name} is neither an ADE setting nor in ALLOWED_OTHER_ENV"
                )
    assert seen > 30


def test_every_value_set_is_valid_for_its_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    """Types and ranges: the settings each group sets build a Settings without an error."""
    for group in all_env_groups():
        for name in list(os.environ):
            if name.upper().startswith("ADE_"):
                monkeypatch.delenv(name)
        for name, value in group.values.items():
            if name.upper().startswith("ADE_") and value is not None:
                # ${...} / $(...) are filled in at deploy time; CHANGE_ME is a placeholder the
                # settings refuse on purpose, so an unedited example fails fast.
                concrete = PLACEHOLDER.sub("x", value).replace("CHANGE_ME", "secret")
                monkeypatch.setenv(name, concrete)
        try:
            Settings()
        except Exception as exc:
            raise AssertionError(f"{group.source}: {exc}") from exc
