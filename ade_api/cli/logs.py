"""`ade-tasks runs logs RUN [-f]`: the output of a run's steps, each under a header; with
`--follow`, as the steps print it (the `step.output` events of the follow stream, batched at
most a second behind) until the run ends.

A step's live output holds its first 80,000 characters (the cap of its stored output); what
follows the live part is read from the step's stored output once the step ends, so the whole
log is the live output plus the rest of the record: nothing twice, and an omission said as
the record says it. The moment the live output reaches the cap, a line says so (the step may
print on for long, and a follower should not take the silence for a hung step).
"""

from __future__ import annotations

import re
import sys

import click

from ade_api.cli.root import Api, runs, url_option
from ade_api.cli.run_stream import merged, run_events_of, sse_events
from ade_api.cli.step_lines import capped_line, step_line
from ade_tasks.json_document import JsonObject
from ade_tasks.settings import Settings

#: Events read per page of a run that is not followed.
PAGE = 5000
#: What the capped line of `runs logs` promises (the web page's live box says the same).
CAPPED_THEN = "the whole output's head and tail show when the step ends"
#: How a stored output marks what its cap dropped (`ade_workers.containment.process.CappedOutput`).
OMISSION = re.compile(r"\n\[\.\.\. (\d+) characters omitted \.\.\.\]\n")


def stored_rest(stored: str, shown: int) -> str:
    """What of a step's stored output follows the first `shown` characters of its output
    (what its live output showed): the exact rest, with the record's omission, if any,
    counted from there."""
    # The record's own mark sits between a head and a tail of equal length; a line of the
    # output that only looks like one does not.
    mark = next((m for m in OMISSION.finditer(stored) if m.start() == len(stored) - m.end()), None)
    if mark is None or shown <= mark.start():
        return stored[shown:]
    tail, tail_starts = stored[mark.end() :], mark.start() + int(mark.group(1))
    if shown >= tail_starts:
        return tail[shown - tail_starts :]
    return f"\n[... {tail_starts - shown} characters omitted ...]\n{tail}"


class LogPrinter:
    """Writes the output of a run's steps from its events, as they come."""

    def __init__(self, api: Api, run_id: str) -> None:
        self._api = api
        self._run_id = run_id
        self._shown: dict[int, int] = {}  # characters of live output written per step
        self._ends_line = True

    def event(self, kind: str, event: JsonObject) -> None:
        data = event.get("data") or {}
        if kind == "step.started":
            self._line(f"==> {step_line(kind, data)[0].strip()}")
        elif kind == "step.output" and event.get("step_index") is not None:
            index = int(event["step_index"])
            offset = int(data.get("offset") or 0)
            if offset < self._shown.get(index, 0):  # a retry of the step starts again
                self._line(f"==> step {index + 1} is run again")
            self._write(data["text"])
            self._shown[index] = offset + len(data["text"])
            if data.get("capped"):  # written once per attempt of the step, by the worker
                self._line(capped_line(int(data["capped"]), CAPPED_THEN))
        elif kind == "step.finished":
            index = int(data["index"])
            self._write(stored_rest(self._stored_output(index), self._shown.pop(index, 0)))
            self._line(f"<== {step_line(kind, data)[0].strip()}")
        elif kind == "end":
            error = f": {data['error']}" if data.get("error") else ""
            self._line(f"run {self._run_id} {data.get('status')}{error}")

    def _stored_output(self, index: int) -> str:
        run = self._api.call("GET", f"/api/v1/runs/{self._run_id}")
        return next((str(s["output"]) for s in run["steps"] if s["index"] == index), "")

    def _write(self, text: str) -> None:
        if text:
            sys.stdout.write(text)
            sys.stdout.flush()
            self._ends_line = text.endswith("\n")

    def _line(self, text: str) -> None:
        self._write(("" if self._ends_line else "\n") + text + "\n")


@runs.command("logs")
@click.argument("run_id")
@click.option(
    "--follow",
    "-f",
    is_flag=True,
    help="print the output as the steps print it, until the run ends",
)
@url_option
@click.pass_obj
def runs_logs(settings: Settings, run_id: str, follow: bool, url: str | None) -> None:
    """Print the output of a run's steps (by id or unique id prefix), each under a header;
    with --follow, as it is printed (at most a second behind) until the run ends."""
    api = Api(settings, url)
    run_id = api.run_id(run_id)
    printer = LogPrinter(api, run_id)
    if follow:
        for kind, event in sse_events(api, run_id):
            printer.event(kind, event)
        return
    stored: list[JsonObject] = []
    while True:
        after = stored[-1]["id"] if stored else 0
        page = api.call("GET", f"/api/v1/runs/{run_id}/events",
                        params={"after": after, "limit": PAGE})  # fmt: skip
        stored += page
        if len(page) < PAGE:
            break
    steps = run_events_of(api.call("GET", f"/api/v1/runs/{run_id}"))
    for event in merged(stored, steps, None):
        printer.event(str(event["kind"]), event)
