"""Credentials in URLs never reach a log line: query parameters named like credentials lose
their values, URL passwords too, whichever logger wrote the line and in both formats."""

from __future__ import annotations

import io
import json
import logging
import logging.config
from collections.abc import Iterator

import pytest

from ade_tasks import logs

SECRET = "s3cr3t-value"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("/hooks/a?token=abc", "/hooks/a?token=[redacted]"),
        ("GET /x?limit=5&access_token=abc&cursor=c HTTP/1.1", "GET /x?limit=5&access_token=[redacted]&cursor=c HTTP/1.1"),
        ("?X-Amz-Signature=abc&X-Amz-Credential=def", "?X-Amz-Signature=[redacted]&X-Amz-Credential=[redacted]"),
        ("?apiKey=a&clientSecret=b&password=c&key=d&sig=e", "?apiKey=[redacted]&clientSecret=[redacted]&password=[redacted]&key=[redacted]&sig=[redacted]"),
        ("?hub.verify_token=a;auth=b", "?hub.verify_token=[redacted];auth=[redacted]"),
        ("?monkey=1&keyboard=2&limit=3&token=", "?monkey=1&keyboard=2&limit=3&token="),
        ('"url": "https://h/x?secret=abc"', '"url": "https://h/x?secret=[redacted]"'),
        ("redis://:hunter2@redis:6379/0 and amqp://ade:pw@rabbit/", "redis://:[redacted]@redis:6379/0 and amqp://ade:[redacted]@rabbit/"),
        ("postgresql://postgres@127.0.0.1:5432/ade", "postgresql://postgres@127.0.0.1:5432/ade"),
        ("a=b outside of a query", "a=b outside of a query"),
    ],
)  # fmt: skip
def test_credentials_in_urls_are_redacted(text: str, expected: str) -> None:
    assert logs.redact_credentials(text) == expected
    assert logs.redact_credentials(expected) == expected  # idempotent


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    yield
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access", "ade_api.test"):
        logging.getLogger(name).handlers = []
        logging.getLogger(name).propagate = True
    root.handlers, level = saved
    root.setLevel(level)


def _streams(config: dict[str, object]) -> io.StringIO:
    """Point every handler of a dictConfig at one in-memory stream."""
    stream = io.StringIO()
    handlers = config["handlers"]
    assert isinstance(handlers, dict)
    for handler in handlers.values():
        handler["stream"] = stream
    return stream


@pytest.mark.usefixtures("restore_logging")
@pytest.mark.parametrize("log_format", ["text", "json"])
def test_the_api_logging_redacts_the_access_log_and_our_own_lines(
    log_format: logs.LogFormat,
) -> None:
    config = logs.uvicorn_log_config(log_format)
    stream = _streams(config)
    logging.config.dictConfig(config)
    access = logging.getLogger("uvicorn.access")
    access.info('%s - "%s %s HTTP/%s" %d', "127.0.0.1:1", "POST", f"/h?token={SECRET}", "1.1", 202)
    own = logging.getLogger("ade_api.test")
    own.warning("calling %s", f"https://api.example/x?access_token={SECRET}")
    try:
        raise ValueError(f"bad https://h/?signature={SECRET}")
    except ValueError:
        own.exception("failed")
    out = stream.getvalue()
    assert SECRET not in out, out
    assert out.count("[redacted]") >= 3, out
    assert "token=[redacted]" in out and "POST" in out and "202" in out


def test_apply_format_redacts_the_handlers_celery_made_in_both_formats() -> None:
    logger = logging.getLogger("test.ade.redaction")
    logger.propagate = False
    for log_format in ("text", "json"):
        stream = io.StringIO()
        logger.handlers = [logging.StreamHandler(stream)]
        logs.apply_format(logger, log_format)  # type: ignore[arg-type]
        logs.apply_format(logger, log_format)  # type: ignore[arg-type]  # once is enough
        assert len(logger.handlers[0].filters) == 1
        logger.warning("GET %s", f"/x?password={SECRET}")
        out = stream.getvalue()
        assert SECRET not in out and "password=[redacted]" in out, out
        if log_format == "json":
            assert json.loads(out)["message"] == "GET /x?password=[redacted]"
    logger.handlers = []


def test_configure_logging_redacts(capsys: pytest.CaptureFixture[str]) -> None:
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        logs.configure_logging("text")
        logging.getLogger("ade_tasks.test").warning("url %s", f"http://u:{SECRET}@h/?key={SECRET}")
    finally:
        root.handlers, level = saved
        root.setLevel(level)
    err = capsys.readouterr().err
    assert SECRET not in err and "http://u:[redacted]@h/?key=[redacted]" in err, err
