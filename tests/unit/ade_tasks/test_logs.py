"""JSON log lines and the run context the worker binds around a task."""

from __future__ import annotations

import io
import json
import logging
import logging.config
from types import SimpleNamespace
from typing import Any

import pytest

from ade_tasks import logs
from ade_workers.celery import metrics as worker_metrics
from ade_workers.celery.sender import EXECUTE_TASK


@pytest.fixture
def captured() -> Any:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logs.JsonFormatter())
    logger = logging.getLogger("test.ade.logs")
    logger.handlers = [handler]
    logger.setLevel(logging.INFO)
    logger.propagate = False

    def lines() -> list[dict[str, Any]]:
        return [json.loads(line) for line in stream.getvalue().splitlines()]

    yield SimpleNamespace(logger=logger, lines=lines)
    logger.handlers = []


def test_a_line_is_one_json_object_with_the_bound_ids(captured: Any) -> None:
    captured.logger.info("outside")
    with logs.log_context(run_id="r-1", rule_id="hello", task_id="t-1"):
        captured.logger.warning("step %s\nfailed", "build")
    captured.logger.info("after")
    outside, inside, after = captured.lines()
    assert set(outside) == {"ts", "level", "logger", "pid", "message"}
    assert inside["message"] == "step build\nfailed"  # escaped: still one line
    assert (inside["run_id"], inside["rule_id"], inside["task_id"]) == ("r-1", "hello", "t-1")
    assert (inside["level"], inside["logger"]) == ("WARNING", "test.ade.logs")
    assert inside["ts"].endswith("Z")
    assert "run_id" not in after


def test_a_traceback_stays_on_the_line_and_extra_fields_are_not_dumped(captured: Any) -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        captured.logger.exception("crashed", extra={"payload": {"token": "s3cret"}})
    (line,) = captured.lines()
    assert "ValueError: boom" in line["exc_info"]
    assert "s3cret" not in json.dumps(line)


def test_the_worker_binds_the_run_around_the_run_task_only(captured: Any) -> None:
    request = SimpleNamespace(shadow="hello")
    run_task = SimpleNamespace(name=EXECUTE_TASK, request=request)
    worker_metrics._on_task_prerun(task_id="t-9", task=run_task, args=["r-9"])
    captured.logger.info("running")
    worker_metrics._on_task_postrun(
        task_id="t-9", task=run_task, retval="succeeded", state="SUCCESS"
    )
    other = SimpleNamespace(name="ade.ingress.dispatch", request=SimpleNamespace())
    worker_metrics._on_task_prerun(task_id="t-10", task=other, args=[7])
    captured.logger.info("matching")
    worker_metrics._on_task_postrun(task_id="t-10", task=other, retval=None, state="SUCCESS")
    captured.logger.info("idle")
    running, matching, idle = captured.lines()
    assert (running["run_id"], running["rule_id"], running["task_id"]) == ("r-9", "hello", "t-9")
    assert matching["task_id"] == "t-10" and "run_id" not in matching
    assert not {"run_id", "rule_id", "task_id"} & set(idle)


def test_json_format_replaces_the_formatters_of_celerys_handlers() -> None:
    logger = logging.getLogger("test.ade.celery")
    handler = logging.StreamHandler(io.StringIO())
    logger.handlers = [handler]
    logs.apply_format(logger, "text")
    assert not isinstance(handler.formatter, logs.JsonFormatter)
    logs.apply_format(logger, "json")
    assert isinstance(handler.formatter, logs.JsonFormatter)
    logger.handlers = []


def test_the_uvicorn_config_is_valid_and_text_keeps_uvicorns_own() -> None:
    text = logs.uvicorn_log_config("text")
    assert text["formatters"]["access"]["()"] == "uvicorn.logging.AccessFormatter"
    assert text["formatters"]["default"]["()"] == "uvicorn.logging.DefaultFormatter"
    config = logs.uvicorn_log_config("json")
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        logging.config.dictConfig(config)
        handler = logging.getLogger("uvicorn.access").handlers[0]
        assert isinstance(handler.formatter, logs.JsonFormatter)
    finally:
        for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
            logging.getLogger(name).handlers = []
            logging.getLogger(name).propagate = True
        root.handlers, level = saved
        root.setLevel(level)
