"""Structured logs: one JSON object per line, carrying the run, rule and task a line belongs to.

`ADE_LOG_FORMAT=json` switches the worker, beat and API processes from text lines to JSON lines:

    {"ts": "2026-01-05T10:00:00.123Z", "level": "INFO", "logger": "ade_workers.engine.runner",
     "pid": 4242, "message": "run 0b1c... finished: succeeded",
     "run_id": "0b1c...", "rule_id": "hello", "task_id": "5f3e..."}

The run, rule and task ids come from context variables that the worker sets around each task
(`ade_workers.celery.metrics` does it from Celery's task_prerun/task_postrun signals), so every line
a run logs, from any module, carries them without that module knowing; keys whose value is unknown
are left out. Only the formatted message (and a traceback) is written: a record's arguments and
`extra` fields are never dumped wholesale, so a trigger payload or an environment cannot slip
into a line by way of logging. Secret values are masked where they are produced (the runner masks
step output and errors); this module adds no secret of its own.

Credentials that travel in URLs are redacted from every line, whatever logged it (uvicorn's access
log, httpx, Celery, our own modules), in both formats: a query parameter whose name says it is a
credential (`token`, `access_token`, `api_key`, `secret`, `signature`, `password`, `key`, `auth`,
`X-Amz-Signature`, ...: see `CREDENTIAL_WORDS`) keeps its name and loses its value
(`?token=[redacted]`), and so does the password of a URL (`redis://:[redacted]@host`).
`RedactingFilter` does it on the handlers this module configures or touches (`configure_logging`,
`apply_format`, `uvicorn_log_config`), and `JsonFormatter` on its own output as well.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar, Token
from datetime import UTC, datetime
from typing import Literal

from ade_tasks.json_document import JsonObject

LogFormat = Literal["text", "json"]

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

RUN_ID: ContextVar[str | None] = ContextVar("ade_run_id", default=None)
RULE_ID: ContextVar[str | None] = ContextVar("ade_rule_id", default=None)
TASK_ID: ContextVar[str | None] = ContextVar("ade_task_id", default=None)
_FIELDS = (("run_id", RUN_ID), ("rule_id", RULE_ID), ("task_id", TASK_ID))

ContextTokens = list[tuple[ContextVar[str | None], Token[str | None]]]


def bind_context(
    *, run_id: str | None = None, rule_id: str | None = None, task_id: str | None = None
) -> ContextTokens:
    """Set the ids lines logged from now on carry; `reset_context(tokens)` undoes it."""
    values = {"run_id": run_id, "rule_id": rule_id, "task_id": task_id}
    return [(var, var.set(values[name])) for name, var in _FIELDS]


def reset_context(tokens: ContextTokens) -> None:
    """Restore the ids that were set before `bind_context` returned `tokens`."""
    for var, token in reversed(tokens):
        try:
            var.reset(token)
        except ValueError:  # set in another context (a signal ran elsewhere): just clear it
            var.set(None)


def clear_context() -> None:
    """Forget the ids (a task ended without its tokens at hand)."""
    for _, var in _FIELDS:
        var.set(None)


@contextmanager
def log_context(
    *, run_id: str | None = None, rule_id: str | None = None, task_id: str | None = None
) -> Iterator[None]:
    """Lines logged inside the block carry these ids."""
    tokens = bind_context(run_id=run_id, rule_id=rule_id, task_id=task_id)
    try:
        yield
    finally:
        reset_context(tokens)


#: A query parameter is a credential when a word of its name (split at `_`, `-`, `.` and
#: camelCase humps) is one of these.
CREDENTIAL_WORDS = frozenset(
    {
        "token", "secret", "signature", "sig", "password", "passwd", "pwd", "key", "apikey",
        "auth", "authorization", "credential", "credentials", "jwt",
    }
)  # fmt: skip
REDACTED = "[redacted]"
_QUERY_PARAM = re.compile(r"(?<=[?&;])([^=&;\s\"'?#<>]+)=([^&;\s\"'#<>]+)")
_URL_PASSWORD = re.compile(r"(\b[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]*:)([^@\s/]+)(@)")
_HUMP = re.compile(r"([a-z0-9])([A-Z])")
_WORD_SPLIT = re.compile(r"[^a-z0-9]+")


def _is_credential(name: str) -> bool:
    words = _WORD_SPLIT.split(_HUMP.sub(r"\1_\2", name).lower())
    return any(word in CREDENTIAL_WORDS for word in words)


def _redact_param(match: re.Match[str]) -> str:
    name = match.group(1)
    return f"{name}={REDACTED}" if _is_credential(name) else match.group(0)


def redact_credentials(text: str) -> str:
    """`text` with the values of credential query parameters and URL passwords redacted."""
    if "=" in text:
        text = _QUERY_PARAM.sub(_redact_param, text)
    if "://" in text:
        text = _URL_PASSWORD.sub(rf"\1{REDACTED}\3", text)
    return text


def _redact_arg(value: object) -> object:
    if isinstance(value, str):
        return redact_credentials(value)
    if value is None or isinstance(value, int | float):
        return value
    text = str(value)  # a URL object, an exception: keep it unless its text holds a credential
    redacted = redact_credentials(text)
    return value if redacted == text else redacted


class RedactingFilter(logging.Filter):
    """Redacts credentials in URLs from a record's message, arguments and traceback; put it on
    a handler, so it sees the records of every logger that reaches the handler."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = redact_credentials(record.msg)
        # The arguments keep their shape: uvicorn's access formatter unpacks them.
        if isinstance(record.args, tuple):
            record.args = tuple(_redact_arg(arg) for arg in record.args)
        elif isinstance(record.args, Mapping):
            record.args = {key: _redact_arg(arg) for key, arg in record.args.items()}
        if record.exc_info and not record.exc_text:
            record.exc_text = redact_credentials(_PLAIN.formatException(record.exc_info))
        return True


_PLAIN = logging.Formatter()


def _add_redaction(handler: logging.Handler) -> None:
    if not any(isinstance(f, RedactingFilter) for f in handler.filters):
        handler.addFilter(RedactingFilter())


class JsonFormatter(logging.Formatter):
    """A log record as one line of JSON: ts, level, logger, pid, message and the known ids."""

    def format(self, record: logging.LogRecord) -> str:
        entry: JsonObject = {
            "ts": datetime.fromtimestamp(record.created, UTC)
            .isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "pid": record.process,
            "message": redact_credentials(record.getMessage()),
        }
        for name, var in _FIELDS:
            # An explicit `extra={"run_id": ...}` wins over the context (e.g. a line about a run
            # logged outside of it).
            value = getattr(record, name, None) or var.get()
            if value:
                entry[name] = str(value)
        if record.exc_text:  # already rendered (and redacted) by RedactingFilter
            entry["exc_info"] = redact_credentials(record.exc_text)
        elif record.exc_info:
            entry["exc_info"] = redact_credentials(self.formatException(record.exc_info))
        if record.stack_info:
            entry["stack_info"] = redact_credentials(self.formatStack(record.stack_info))
        # json.dumps escapes newlines: a multi-line message or traceback stays on one line.
        return json.dumps(entry, ensure_ascii=False, default=str)


def formatter_for(log_format: LogFormat) -> logging.Formatter:
    """The formatter of a log format."""
    return JsonFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT)


def apply_format(logger: logging.Logger, log_format: LogFormat) -> None:
    """Give every handler of `logger` the format and the credential redaction (for handlers
    somebody else created, such as the ones Celery sets up for the worker and beat); text keeps
    the formatter the handler's creator chose."""
    for handler in logger.handlers:
        _add_redaction(handler)
        if log_format == "json":
            handler.setFormatter(JsonFormatter())


def configure_logging(log_format: LogFormat, level: int | str = logging.INFO) -> None:
    """Log to stderr in `log_format` from the root logger (replacing its handlers)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter_for(log_format))
    _add_redaction(handler)
    root = logging.getLogger()
    root.handlers = [handler]
    root.setLevel(level)


_REDACT = {"redact": {"()": "ade_tasks.logs.RedactingFilter"}}


def uvicorn_log_config(log_format: LogFormat, level: str = "INFO") -> JsonObject:
    """uvicorn's `log_config` for a format, with credentials redacted on every handler (the
    access log above all: a hook's `?token=` is in its request line). JSON sends uvicorn's
    loggers and the root logger through `JsonFormatter`; text keeps uvicorn's own formatters
    (its default config, by name: this module does not import uvicorn) and gives the root
    logger, which the API's own modules log to, `TEXT_FORMAT`."""
    if log_format == "json":
        handler = {
            "class": "logging.StreamHandler",
            "formatter": "json",
            "stream": "ext://sys.stderr",
            "filters": ["redact"],
        }
        return {
            "version": 1,
            "disable_existing_loggers": False,
            "filters": _REDACT,
            "formatters": {"json": {"()": "ade_tasks.logs.JsonFormatter"}},
            "handlers": {"default": handler},
            "root": {"handlers": ["default"], "level": level},
            "loggers": {
                name: {"handlers": ["default"], "level": level, "propagate": False}
                for name in ("uvicorn", "uvicorn.error", "uvicorn.access")
            },
        }

    def stream(formatter: str, target: str) -> JsonObject:
        return {
            "class": "logging.StreamHandler",
            "formatter": formatter,
            "stream": target,
            "filters": ["redact"],
        }

    access_fmt = '%(levelprefix)s %(client_addr)s - "%(request_line)s" %(status_code)s'
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": _REDACT,
        "formatters": {
            "default": {
                "()": "uvicorn.logging.DefaultFormatter",
                "fmt": "%(levelprefix)s %(message)s",
                "use_colors": None,
            },
            "access": {"()": "uvicorn.logging.AccessFormatter", "fmt": access_fmt},
            "text": {"format": TEXT_FORMAT},
        },
        "handlers": {
            "default": stream("default", "ext://sys.stderr"),
            "access": stream("access", "ext://sys.stdout"),
            "root": stream("text", "ext://sys.stderr"),
        },
        "root": {"handlers": ["root"], "level": level},
        "loggers": {
            "uvicorn": {"handlers": ["default"], "level": level, "propagate": False},
            "uvicorn.error": {"level": level},
            "uvicorn.access": {"handlers": ["access"], "level": level, "propagate": False},
        },
    }
