"""`ApiAddress.from_environment` (what `runs list` reads, without pydantic) resolves the API URL
and token exactly as `Settings.effective_api_url` / `effective_api_token` do, case by case."""

from __future__ import annotations

from pathlib import Path

import pytest

from ade_tasks import api_address
from ade_tasks.api_address import ApiAddress
from ade_tasks.settings import Settings
from ade_workers.doctor.check import settings_problems

#: Each case: the environment, the working directory's .env, whether the dev token file exists.
CASES = {
    "nothing set": ({}, None, False),
    "environment": ({"ADE_API_URL": "http://api.example:9000/", "ADE_API_TOKEN": "env-token"},
                    None, False),
    ".env": ({}, "ADE_API_URL=http://from-file:1/\nADE_API_TOKEN='file token'\n", False),
    "environment over .env": (
        {"ADE_API_URL": "http://from-env:2"},
        "ADE_API_URL=http://from-file:1\nADE_API_TOKEN=file-token\n",
        False,
    ),
    "dev token file": ({}, None, True),
    "dev token file under ADE_DATA_DIR": ({"ADE_DATA_DIR": "state"}, None, True),
    "token over the dev token file": ({"ADE_API_TOKEN": "env-token"}, None, True),
    "empty token": ({"ADE_API_TOKEN": ""}, None, True),
    "host and port": ({"ADE_API_HOST": "0.0.0.0", "ADE_API_PORT": "9123"}, None, False),
    "host and port from .env": ({}, "ADE_API_HOST=::\nADE_API_PORT=9124\n", False),
    "lower-case names": ({"ade_api_url": "http://lower:3"}, "ade_api_token=lower-token\n", False),
}  # fmt: skip


@pytest.mark.parametrize(("environ", "env_file", "token_file"), CASES.values(), ids=CASES.keys())
def test_the_address_alone_agrees_with_the_settings(
    environ: dict[str, str],
    env_file: str | None,
    token_file: bool,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given an environment, maybe a .env and maybe the token file `ade-tasks dev` writes
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ADE_ENV_FILE")  # read the working directory's .env, as the CLI does
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    if env_file is not None:
        (tmp_path / ".env").write_text(env_file)
    if token_file:
        data_dir = tmp_path / environ.get("ADE_DATA_DIR", ".ade")
        data_dir.mkdir()
        (data_dir / "api-token").write_text("dev-token\n")

    # When both read it
    settings, address = Settings(), ApiAddress.from_environment()

    # Then they agree on every part of the address
    assert address == ApiAddress(
        effective_api_url=settings.effective_api_url,
        effective_api_token=settings.effective_api_token,
        dev_token_file=settings.dev_token_file,
    )


def test_with_nothing_set_it_is_the_dev_address() -> None:
    assert ApiAddress.from_environment({"ADE_ENV_FILE": ""}) == ApiAddress(
        "http://127.0.0.1:8787", None, Path(".ade/api-token")
    )


def test_its_names_and_defaults_are_the_settings_own() -> None:
    fields = Settings.model_fields
    for name in (api_address.API_URL, api_address.API_HOST, api_address.API_PORT,
                 api_address.API_TOKEN, api_address.DATA_DIR):  # fmt: skip
        assert name in fields
    assert Settings.model_config["env_prefix"] == api_address.ENV_PREFIX
    assert fields[api_address.API_HOST].default == api_address.DEFAULT_API_HOST
    assert fields[api_address.API_PORT].default == api_address.DEFAULT_API_PORT
    assert fields[api_address.DATA_DIR].default == api_address.EMBEDDED_DATA_DIR


@pytest.mark.parametrize(
    ("environ", "env_file", "said"),
    [
        ({"ADE_API_PORT": "eighty"}, None, "ADE_API_PORT"),
        ({}, "ADE_API_PORT=9000\nADE_API_URL http://127.0.0.1:9\n", ".env line 2 (ADE_API_URL)"),
        ({"ADE_ENV_FILE": "missing.env"}, None, "ADE_ENV_FILE names missing.env"),
    ],
    ids=["bad port", "unparsable .env line", "missing ADE_ENV_FILE"],
)
def test_what_the_settings_refuse_it_refuses_naming_the_variable(
    environ: dict[str, str],
    env_file: str | None,
    said: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ADE_ENV_FILE")
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    if env_file is not None:
        (tmp_path / ".env").write_text(env_file)

    with pytest.raises(ValueError) as settings_refused:
        Settings()
    with pytest.raises(ValueError) as refused:
        ApiAddress.from_environment()

    # As the CLI reports each (`the settings do not load: ...`)
    assert said in str(refused.value)
    assert said.split()[0] in "; ".join(settings_problems(settings_refused.value))
