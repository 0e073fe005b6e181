"""`ade-tasks dev` serves its API like `ade-tasks api` does: slow request heads are closed and
credentials never reach a log line."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi import FastAPI

from ade_api.cli.dev import Console, api_server_config, cli_hint, ensure_data_dir
from ade_api.http.header_timeout import HeaderTimeoutProtocol
from ade_tasks.db.rule_sync import SyncReport
from ade_tasks.errors import RuleProblem
from ade_tasks.rules.loader import LoadResult
from ade_tasks.settings import Settings

SECRET = "s3cr3t-value"


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    yield
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logging.getLogger(name).handlers = []
        logging.getLogger(name).propagate = True
    root.handlers, level = saved
    root.setLevel(level)


@pytest.mark.usefixtures("restore_logging")
def test_the_embedded_api_closes_connections_whose_headers_are_slow() -> None:
    # Given the uvicorn config dev builds
    config = api_server_config(FastAPI(), Settings())
    # When uvicorn loads it
    config.load()
    # Then it serves with the header-deadline protocol
    assert config.http_protocol_class is HeaderTimeoutProtocol


@pytest.mark.usefixtures("restore_logging")
@pytest.mark.parametrize("log_format", ["text", "json"])
def test_the_embedded_api_redacts_credentials_in_its_log_lines(
    log_format: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given dev's uvicorn config in either log format
    api_server_config(FastAPI(), Settings(log_format=log_format))
    # When uvicorn and the API's own modules log a URL with a credential
    logging.getLogger("uvicorn.error").warning("from %s", f"/hooks/h?token={SECRET}")
    logging.getLogger("ade_api.test").warning("calling %s", f"https://x.example/?api_key={SECRET}")
    # Then neither line shows it
    err = capsys.readouterr().err
    assert SECRET not in err, err
    assert "token=[redacted]" in err and "api_key=[redacted]" in err, err


def test_a_fresh_data_dir_is_private_and_kept_out_of_git(tmp_path: Path) -> None:
    # When dev prepares a data dir that does not exist yet
    ensure_data_dir(Settings(data_dir=tmp_path / ".ade"))
    # Then it is this user's only, and git ignores everything in it
    assert (tmp_path / ".ade").stat().st_mode & 0o077 == 0
    assert (tmp_path / ".ade" / ".gitignore").read_text().splitlines()[-1] == "*"


def test_an_edited_gitignore_in_the_data_dir_is_left_as_it_is(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / ".ade")
    ensure_data_dir(settings)
    (tmp_path / ".ade" / ".gitignore").write_text("*\n# kept\n")
    ensure_data_dir(settings)
    assert (tmp_path / ".ade" / ".gitignore").read_text() == "*\n# kept\n"


def test_the_banner_names_the_checkouts_cli_by_a_path_that_works_in_a_new_shell() -> None:
    # Given dev started in a checkout with its venv, on the default port
    hint = cli_hint(Settings(), Path("/src/ade"), Path("/src/ade/.venv/bin/ade-tasks"), {"hello"})
    # Then the command needs no PATH and no --url, and the PATH line is exact
    assert hint[0] == "try it in another shell, in this directory (/src/ade):"
    assert hint[1] == "  .venv/bin/ade-tasks run hello --wait"
    assert hint[3] == '  export PATH="/src/ade/.venv/bin:$PATH"'


def test_the_banner_adds_what_a_new_shell_would_not_find_by_default() -> None:
    # Given a CLI installed elsewhere, another port and a data dir of its own
    settings = Settings(api_port=9000, data_dir=Path("/var/ade data"))
    hint = cli_hint(settings, Path("/src/ade"), Path("/opt/ade/bin/ade-tasks"), set())
    # Then the command carries them (quoted), and names a rule-free command without `hello`
    assert hint[1] == (
        "  ADE_DATA_DIR='/var/ade data' /opt/ade/bin/ade-tasks rules list "
        "--url http://127.0.0.1:9000"
    )
    assert hint[3] == '  export PATH="/opt/ade/bin:$PATH"'


def test_each_rule_problem_is_a_line_and_the_last_good_rules_are_said_to_stay() -> None:
    lines: list[str] = []
    console = Console(lambda text, err=False: lines.append(text))
    problems = [RuleProblem("a.yaml", "triggers", "must be a list"),
                RuleProblem("b.yaml", "id", "required")]  # fmt: skip
    console.rules_synced(LoadResult(problems=problems), SyncReport(updated=["x"]), ())
    assert lines[0] == "rules: updated x"
    assert [line for line in lines if "rule problem" in line] == [
        f"  rule problem: {problems[0]}",
        f"  rule problem: {problems[1]}",
    ]
    assert lines[-1].startswith("rules: 2 problems; every rule keeps its last good version")
