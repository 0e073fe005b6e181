"""`.env` in the working directory is read by every process, as config/.env.example says; the
environment wins over it, setting by setting; ADE_ENV_FILE names another file, or (empty) none;
a line python-dotenv cannot parse is refused by file and line, without its value."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from pydantic_settings import SettingsError

from ade_api.cli import main
from ade_tasks.settings import Settings
from tests.support import BIN, child_env


def reading_dotenv(extra: dict[str, str]) -> dict[str, str]:
    """A child's environment that reads the env file of its working directory."""
    env = child_env(extra)
    env.pop("ADE_ENV_FILE", None)
    return env


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory whose `.env` is read (the root conftest turns env files off)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ADE_ENV_FILE")
    return tmp_path


def test_dotenv_in_the_working_directory_is_read(workdir: Path) -> None:
    (workdir / ".env").write_text(
        "# cluster settings\nADE_API_PORT=9000\nADE_GITHUB__POLL=off\n"
        'export ADE_RULES_DIR=rules\nADE_HOOKS__DEPLOYS=\'{"scheme": "token", '
        '"tokens": ["t0ken"]}\'\n'
    )

    settings = Settings()

    assert settings.api_port == 9000
    assert settings.github.poll == "off"
    assert settings.rules_dir == Path("rules")
    assert settings.hooks["deploys"].scheme == "token"


def test_the_environment_wins_over_dotenv_setting_by_setting(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (workdir / ".env").write_text(
        "ADE_API_PORT=9000\nADE_GITHUB__POLL=off\nADE_GITHUB__API_URL=https://ghe.example/api/v3\n"
    )
    monkeypatch.setenv("ADE_API_PORT", "9100")
    monkeypatch.setenv("ADE_GITHUB__API_URL", "http://127.0.0.1:9/api/v3")

    settings = Settings()

    assert settings.api_port == 9100
    assert settings.github.api_url == "http://127.0.0.1:9/api/v3"
    assert settings.github.poll == "off"  # the file's, for the variable the environment lacks


def test_ade_env_file_names_another_file_or_none(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (workdir / ".env").write_text("ADE_API_PORT=9000\n")
    (workdir / "cluster.env").write_text("ADE_API_PORT=9200\n")

    monkeypatch.setenv("ADE_ENV_FILE", str(workdir / "cluster.env"))
    assert Settings().api_port == 9200
    monkeypatch.setenv("ADE_ENV_FILE", "")
    assert Settings().api_port == 8787


def test_an_env_file_named_but_missing_is_refused(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ADE_ENV_FILE", str(workdir / "typo.env"))

    with pytest.raises(SettingsError, match=r"ADE_ENV_FILE names .*typo\.env, which is not a file"):
        Settings()


def test_a_line_dotenv_cannot_parse_is_refused_by_line_without_its_value(workdir: Path) -> None:
    # python-dotenv would skip line 2 and, for the unclosed quote, every line after it
    (workdir / ".env").write_text(
        'ADE_API_PORT=9000\nnot a setting\nADE_GITHUB__TOKEN="ghp_s3cret\nADE_API_HOST=0.0.0.0\n'
    )

    with pytest.raises(SettingsError) as refused:
        Settings()

    message = str(refused.value)
    assert ".env line 2, line 3 (ADE_GITHUB__TOKEN)" in message
    assert "close every quote" in message
    assert "ghp_s3cret" not in message


def test_the_cli_reads_dotenv_of_its_working_directory_and_the_environment_wins(
    tmp_path: Path,
) -> None:
    # Nothing listens on port 9 or 7: the error names the API address the CLI chose.
    (tmp_path / ".env").write_text("ADE_API_URL=http://127.0.0.1:9\n")
    cli = [str(BIN / "ade-tasks"), "runs", "list"]

    from_file = subprocess.run(cli, cwd=tmp_path, env=reading_dotenv({}), capture_output=True,
                               text=True, timeout=60)  # fmt: skip
    overridden = subprocess.run(cli, cwd=tmp_path, capture_output=True, text=True, timeout=60,
                                env=reading_dotenv({"ADE_API_URL": "http://127.0.0.1:7"}))  # fmt: skip

    assert from_file.returncode == 1
    assert "cannot reach the ADE API at http://127.0.0.1:9 " in from_file.stderr
    assert "cannot reach the ADE API at http://127.0.0.1:7 " in overridden.stderr


def test_the_cli_says_which_dotenv_line_it_cannot_parse(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("ADE_API_PORT=9000\nADE_API_URL http://127.0.0.1:9\n")

    done = subprocess.run([str(BIN / "ade-tasks"), "runs", "list"], cwd=tmp_path,
                          env=reading_dotenv({}), capture_output=True, text=True, timeout=60)  # fmt: skip

    assert done.returncode == 2
    assert done.stderr.startswith("error: the settings do not load: .env line 2 (ADE_API_URL)")


def test_the_celery_app_of_workers_and_beats_reads_dotenv(tmp_path: Path) -> None:
    # `celery -A ade_workers.celery.app worker|beat` builds its app from the settings
    (tmp_path / ".env").write_text("ADE_BROKER_URL=redis://127.0.0.1:6399/5\n")
    script = "from ade_workers.celery.app import app; print(app.conf.broker_url)"

    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=reading_dotenv({}),
                          capture_output=True, text=True, timeout=60)  # fmt: skip

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "redis://127.0.0.1:6399/5"


def test_the_providers_report_sees_a_key_set_in_dotenv(workdir: Path) -> None:
    # `ade-tasks providers` reads settings by their variable names, not through Settings
    (workdir / ".env").write_text("ADE_PROVIDERS__OPENAI__API_KEY=sk-from-dotenv\n")

    result = CliRunner().invoke(main, ["providers", "--json", "--local"])  # no API asked

    assert result.exit_code == 0, result.output
    local = json.loads(result.output)["local"]
    openai = next(item for item in local if item["name"] == "openai")
    assert openai["ready"] and openai["credentials"] == "ADE_PROVIDERS__OPENAI__API_KEY"
