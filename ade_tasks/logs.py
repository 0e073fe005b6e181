"""Structured logs: one JSON object per line, carrying the run, rule and task a line belongs to.

`ADE_LOG_FORMAT=json` switches the worker, beat and API processes from text lines to JSON lines:

    {"ts": "2026-01-05T10:00:00.123Z", "level": "INFO", "logger": "ade_workers.runner",
     "pid": 4242, "message": "run 0b1c... finished: succeeded",
     "run_id": "0b1c...", "rule_id": "hello", "task_id": "5f3e..."}

The run, rule and task ids come from context variables that the worker sets around each task
(`ade_workers.metrics` does it from Celery's task_prerun/task_postrun signals), so every line a
run logs, from any module, carries them without that module knowing; keys whose value is unknown
are left out. Only the formatted message (and a traceback) is written: a record's arguments and
`extra` fields are never dumped wholesale, so a trigger payload or an environment cannot slip
into a line by way of logging. Secret values are masked where they are produced (the runner masks
step output and errors); this module adds no secret of its own.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar, Token
from datetime import UTC, datetime
from typing import Any, Literal

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


class JsonFormatter(logging.Formatter):
    """A log record as one line of JSON: ts, level, logger, pid, message and the known ids."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC)
            .isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "pid": record.process,
            "message": record.getMessage(),
        }
        for name, var in _FIELDS:
            # An explicit `extra={"run_id": ...}` wins over the context (e.g. a line about a run
            # logged outside of it).
            value = getattr(record, name, None) or var.get()
            if value:
                entry[name] = str(value)
        if record.exc_info:
            entry["exc_info"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["exc_info"] = record.exc_text
        if record.stack_info:
            entry["stack_info"] = self.formatStack(record.stack_info)
        # json.dumps escapes newlines: a multi-line message or traceback stays on one line.
        return json.dumps(entry, ensure_ascii=False, default=str)


def formatter_for(log_format: LogFormat) -> logging.Formatter:
    """The formatter of a log format."""
    return JsonFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT)


def apply_format(logger: logging.Logger, log_format: LogFormat) -> None:
    """Give every handler of `logger` the format (for handlers somebody else created, such as
    the ones Celery sets up for the worker and beat)."""
    if log_format != "json":
        return  # text: keep the formatter the handler's creator chose
    for handler in logger.handlers:
        handler.setFormatter(JsonFormatter())


def configure_logging(log_format: LogFormat, level: int | str = logging.INFO) -> None:
    """Log to stderr in `log_format` from the root logger (replacing its handlers)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter_for(log_format))
    root = logging.getLogger()
    root.handlers = [handler]
    root.setLevel(level)


def uvicorn_log_config(log_format: LogFormat, level: str = "INFO") -> dict[str, Any] | None:
    """uvicorn's `log_config` for a format: None (uvicorn's own text config) for text, else a
    config that sends uvicorn's loggers and the root logger through `JsonFormatter`."""
    if log_format != "json":
        return None
    handler = {"class": "logging.StreamHandler", "formatter": "json", "stream": "ext://sys.stderr"}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": "ade_tasks.logs.JsonFormatter"}},
        "handlers": {"default": handler},
        "root": {"handlers": ["default"], "level": level},
        "loggers": {
            name: {"handlers": ["default"], "level": level, "propagate": False}
            for name in ("uvicorn", "uvicorn.error", "uvicorn.access")
        },
    }
