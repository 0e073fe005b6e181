"""`ade-tasks dev` serves its API like `ade-tasks api` does: slow request heads are closed and
credentials never reach a log line."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from fastapi import FastAPI

from ade_api.dev import api_server_config
from ade_api.header_timeout import HeaderTimeoutProtocol
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
