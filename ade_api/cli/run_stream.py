"""A run's events as the CLI reads them: the API's Server-Sent Events stream of a run (which
`run --wait`, `runs events --follow` and `runs logs --follow` follow), and the step events the
API does not store, rebuilt from the run (`runs events`, `runs logs`). Shared by the command
modules, which import no other command module (ade_api/cli/__init__.py).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import datetime
from typing import TYPE_CHECKING

from ade_api.cli.root import Api, fail
from ade_tasks.json_document import JsonObject

if TYPE_CHECKING:
    import httpx

#: The API sends a comment every 15 s; a silent connection this long is dead.
READ_TIMEOUT = 40.0
RECONNECTS = 5
TIMED_OUT = "timeout"
FINAL = frozenset({"succeeded", "failed", "cancelled", "timed_out", "skipped"})


def sse_events(
    api: Api, run_id: str, *, after: int = 0, deadline: float | None = None
) -> Iterator[tuple[str, JsonObject]]:
    """(kind, event) pairs of the run's event stream until its `end` event (included); a
    `timeout` pair when `deadline` (time.monotonic) passes first. Reconnects from the last event
    id after a dropped connection (at most RECONNECTS times in a row)."""
    import httpx  # here: the modules using this module for its other functions never need it

    path = f"/api/v1/runs/{run_id}/events"
    last_id, failures = after, 0
    while True:
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            yield TIMED_OUT, {}
            return
        read = READ_TIMEOUT if left is None else max(0.1, min(READ_TIMEOUT, left))
        try:
            with api.client.stream(
                "GET",
                path,
                params={"follow": "true", "after": last_id},
                timeout=httpx.Timeout(10.0, read=read),
            ) as response:
                if response.status_code >= 400:
                    response.read()
                    _refused(response, path)
                failures = 0
                for kind, event in _parse(response.iter_lines()):
                    if event.get("id") is not None:
                        last_id = int(event["id"])
                    yield kind, event
                    if kind == "end":
                        return
                    if deadline is not None and time.monotonic() >= deadline:
                        yield TIMED_OUT, {}
                        return
        except httpx.ReadTimeout:
            continue  # the deadline check above decides; else reconnect
        except httpx.TransportError as exc:
            failures += 1
            if failures > RECONNECTS:
                fail(
                    f"lost the event stream of run {run_id} at {api.base} ({exc}); "
                    f"look at it with `ade-tasks runs show {run_id}`",
                    code=1,
                )
            time.sleep(min(2.0, 0.2 * failures))


def _refused(response: httpx.Response, path: str) -> None:
    try:
        detail = response.json().get("detail", response.text)
    except ValueError:
        detail = response.text
    fail(f"GET {path} answered {response.status_code}: {detail}", code=1)


def _parse(lines: Iterator[str]) -> Iterator[tuple[str, JsonObject]]:
    """Server-Sent Events: `event:` and `data:` lines up to a blank line; comments skipped."""
    kind, data = "message", list[str]()
    for line in lines:
        if not line:
            if data:
                try:
                    event = json.loads("\n".join(data))
                except ValueError:
                    event = {"data": "\n".join(data)}
                yield kind, event
            kind, data = "message", list[str]()
        elif line.startswith(":"):
            yield "keep-alive", {}
        else:
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "event":
                kind = value
            elif name == "data":
                data.append(value)


def step_status(step: JsonObject, run: JsonObject) -> str:
    """What happened to the step: a step the run's cancel ended is `cancelled` (it is recorded
    `failed`, with the cancel's reason, at or after the cancel), as `--follow` shows it."""
    if step["status"] != "failed" or run["status"] != "cancelled":
        return str(step["status"])
    by_cancel = step["error"] is not None and step["error"] == run["error"]
    ended, cancelled = _parsed(step["finished_at"]), _parsed(run["finished_at"])
    if by_cancel or (ended and cancelled and ended >= cancelled):
        return "cancelled"
    return str(step["status"])


def step_event_data(step: JsonObject, run: JsonObject) -> JsonObject:
    """A step of `GET /api/v1/runs/{id}` as the data of the `step.finished` event the follow
    stream sends for it."""
    data = {key: step[key] for key in ("index", "step_id", "action_type", "exit_code", "error",
                                       "finished_at")}  # fmt: skip
    data["status"] = step_status(step, run)
    data["output_tail"] = "\n".join(step["output"].rstrip().splitlines()[-20:])
    if step["status"] == "skipped":
        data["reason"] = (step.get("result") or {}).get("skipped")
    return data


def run_events_of(run: JsonObject) -> list[JsonObject]:
    """The `step.started`, `step.finished` and `end` events the follow stream sends for a run,
    rebuilt from the run as `GET /api/v1/runs/{id}` shows it (the API stores no such events)."""
    events = []
    for step in run["steps"]:
        about = {"index": step["index"], "step_id": step["step_id"],
                 "action_type": step["action_type"]}  # fmt: skip
        if step["status"] != "skipped":  # a skipped step never started
            events.append(_synthetic(step["started_at"], "step.started", step["index"],
                                     {**about, "started_at": step["started_at"]}))  # fmt: skip
        if step["finished_at"]:
            data = step_event_data(step, run)
            events.append(_synthetic(step["finished_at"], "step.finished", step["index"], data))
    if run["status"] in FINAL and run["finished_at"]:
        data = {"status": run["status"], "error": run["error"], "finished_at": run["finished_at"]}
        events.append(_synthetic(run["finished_at"], "end", None, data))
    return events


def _synthetic(at: str, kind: str, step_index: int | None, data: JsonObject) -> JsonObject:
    return {"id": None, "at": at, "kind": kind, "step_index": step_index, "data": data}


def merged(
    stored: list[JsonObject], synthetic: list[JsonObject], until: datetime | None
) -> list[JsonObject]:
    """The stored events and the rebuilt step events in the order they happened (those after
    `until`, the last stored event of a full page, wait for that page's successor: none)."""
    kept = [e for e in synthetic if until is None or datetime.fromisoformat(e["at"]) <= until]
    # Stored events first at the same instant: a step's end is recorded after what it did.
    ordered = [(datetime.fromisoformat(e["at"]), 1, n, e) for n, e in enumerate(kept)]
    ordered += [(datetime.fromisoformat(e["at"]), 0, n, e) for n, e in enumerate(stored)]
    return [event for *_, event in sorted(ordered, key=lambda entry: entry[:3])]


def _parsed(stamp: str | None) -> datetime | None:
    return datetime.fromisoformat(stamp) if stamp else None
