"""The web page's actions on runs: Retry and Cancel on a run's page, and the inbox of every
pending input (gates waiting for an approval, agents' tool calls, agents' questions) with its
Approve / Decline (or Answer) buttons.

Retry and Cancel call `ade_api.http.run_control`, as `POST /api/v1/runs/{id}/retry` and
`/cancel` do, so the checks and the words of a refusal are the API's (a retry of an active run
or a cancel of a finished one is 409). The inbox's buttons post to `/ui/inputs/{id}/answer`
(`ade_api.http.web.routes`), which calls `ade_tasks.runs.approvals.answer_input` as
`POST /api/v1/inputs/{id}/answer` does. Roles are the API's: the buttons are shown to operators
and admins only, and the auth middleware refuses any other token's POST to `/ui` (403)
whatever the page showed. A retry form carries a key (as the Run-now form does), so a double
submit starts one retry, not two.
"""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response
from sqlalchemy import select
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from ade_api.http import run_control
from ade_api.http.auth import actor
from ade_api.http.web.pages import error_page, posted_form, read, redirect, render, services_of
from ade_api.http.web.routes import check_run_id
from ade_tasks.db import approvals as approvals_db
from ade_tasks.db.schema import ApprovalRow, RunRow
from ade_tasks.errors import AdeError
from ade_tasks.states import Answer, ApprovalStatus

router = APIRouter(prefix="/ui", include_in_schema=False)

#: The buttons of each kind of pending input: (answer, label, button class).
BUTTONS = {
    "gate": ((Answer.ACCEPT, "Approve", ""), (Answer.DECLINE, "Decline", "secondary")),
    "tool_call": (
        (Answer.ACCEPT, "Approve", ""),
        (Answer.ACCEPT_FOR_SESSION, "Approve for session", "secondary"),
        (Answer.DECLINE, "Decline", "secondary"),
    ),
    "question": ((Answer.ACCEPT, "Answer", ""), (Answer.DECLINE, "Decline", "secondary")),
}


@router.post("/runs/{run_id}/retry")
async def retry(request: Request, run_id: str) -> Response:
    """Retry a finished run (operator): a new run with the same trigger; show it."""
    form = await posted_form(request)
    key = form.get("key", "").strip()[:64]
    try:
        check_run_id(run_id)
        retried = await run_in_threadpool(
            run_control.retry_run, services_of(request), run_id, actor(request, None),
            f"ui:{key}" if key else None,
        )  # fmt: skip
    except AdeError as exc:
        return error_page(request, exc)
    return redirect(f"/ui/runs/{retried.result.run.id}")


@router.post("/runs/{run_id}/cancel")
async def cancel(request: Request, run_id: str) -> Response:
    """Cancel a queued, waiting or running run (operator), with an optional note; show it."""
    form = await posted_form(request)
    note = form.get("note", "").strip() or None
    try:
        check_run_id(run_id)
        await run_in_threadpool(
            run_control.cancel_run, services_of(request), run_id, actor(request, None), note
        )
    except AdeError as exc:
        return error_page(request, exc)
    return redirect(f"/ui/runs/{run_id}")


@dataclass(frozen=True)
class Waiting:
    """A pending input as the inbox shows it: the input and the run that waits for it."""

    input: ApprovalRow
    run: RunRow

    @property
    def kind(self) -> str:
        return self.input.kind

    @property
    def question(self) -> str:
        """The agent's question, for a question; else empty."""
        if self.kind != "question":
            return ""
        return str((self.input.arguments or {}).get("question", ""))


def waiting_inputs(session: Session) -> list[Waiting]:
    """Every pending input with its run, oldest first (the one waiting longest on top)."""
    rows = list(approvals_db.list_approvals(session, ApprovalStatus.PENDING.value))
    runs = {
        run.id: run
        for run in session.scalars(select(RunRow).where(RunRow.id.in_({r.run_id for r in rows})))
    }
    found = [Waiting(row, runs[row.run_id]) for row in rows if row.run_id in runs]
    return sorted(found, key=lambda item: (item.input.requested_at, item.input.id))


@router.get("/inbox")
def inbox_page(request: Request) -> HTMLResponse:
    """What waits for an operator: approvals (gates and agents' tool calls) and questions."""
    items = read(request, waiting_inputs)
    questions = [item for item in items if item.kind == "question"]
    approvals = [item for item in items if item.kind != "question"]
    return render(
        request, "inbox.html", f"Inbox ({len(items)})",
        approvals=approvals, questions=questions, buttons=BUTTONS,
    )  # fmt: skip
