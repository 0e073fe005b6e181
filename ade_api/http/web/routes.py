"""The run-history web page: server-rendered HTML under `/ui`, no build step.

Pages: the runs list (filters, live status, each run's duration beside a sparkline of its
rule's recent durations), a run (a Gantt timeline of its steps, live while it runs; each step's
output and JUnit counts; transcript, findings, pending inputs with their answer buttons,
review-queue moves) and the review queue here; the rules and a rule's page in
`ade_api.http.web.rules`, the "Run now" form (now, at a time or after a delay) in
`ade_api.http.web.run_form`, and the controls (scheduled runs, pause and resume, enable and
disable) in `ade_api.http.web.controls`.

Python builds data here; the Jinja2 templates in `templates/` build the markup, with autoescape
on for all of them (`ade_api.http.web.pages`), and the charts are inline SVG drawn on the server
(`ade_api.http.web.charts`), so every page reads the same without JavaScript. The pages carry a
strict Content-Security-Policy (scripts and styles only from `/ui/static`, no framing), so even
a missed escape could not run a script. Live status is a few lines of vanilla JS
(`static/live.js`) polling the JSON API, which the same cookie authenticates.

Authentication is `ade_api.http.auth.AuthMiddleware`'s: the login form posts a token to `/ui/login`,
which verifies it and stores it in the `ade_token` cookie (HttpOnly, SameSite=Strict, Path=/;
Secure under HTTPS). Other `/ui` pages need a viewer token (without one they redirect to the
login form); every state change is a POST and needs an operator token, and the buttons for them
are shown to operators and admins only. CSRF: the cookie is SameSite=Strict, so a cross-site
form post or navigation never carries it, and no GET changes state; that is the protection
(no CSRF token). The pages never show settings, environment variables, tokens or raw trigger
payloads (only a manual run's typed inputs); step output, results and transcripts are masked
by the runner before they are stored.
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TypeVar
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from ade_api.http.auth import COOKIE, actor
from ade_api.http.web import charts
from ade_api.http.web.pages import (
    back_to,
    error_page,
    posted_form,
    read,
    redirect,
    render,
    services_of,
)
from ade_api.http.web.rule_rows import stored_rule
from ade_tasks.clock import utcnow
from ade_tasks.db import approvals as approvals_db
from ade_tasks.db import history
from ade_tasks.db import rules as rules_db
from ade_tasks.db import run_events as run_events_db
from ade_tasks.db import run_steps as run_steps_db
from ade_tasks.db import run_views as run_views_db
from ade_tasks.db import runs as runs_db
from ade_tasks.db import threads as threads_db
from ade_tasks.db import tokens as tokens_db
from ade_tasks.db.schema import ApprovalRow, RuleRow, RunRow, RunStepRow
from ade_tasks.errors import AdeError, InvalidInputError, NotFoundError
from ade_tasks.runs.approvals import answer_input
from ade_tasks.runs.review import QUEUE_ACTIONS
from ade_tasks.states import Answer, QueueStatus, RunStatus

log = logging.getLogger(__name__)

router = APIRouter(prefix="/ui", include_in_schema=False)

STATIC = Path(__file__).parent / "static"
_ASSETS = {"style.css": "text/css; charset=utf-8", "live.js": "text/javascript; charset=utf-8"}
PAGE_SIZE = 50
MAX_EVENTS = 500
SPARK_RUNS = 20
ACTIVE = frozenset({RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.WAITING})
OPEN_REVIEW = (
    QueueStatus.PENDING_REVIEW,
    QueueStatus.ACTIONABLE_FINDINGS,
    QueueStatus.VERIFICATION_REQUIRED,
)
#: The answers to a pending input: (value, label, button class, only for an agent's tool call).
#: "For the session" means nothing for a gate before a step.
ANSWERS = (
    (Answer.ACCEPT.value, "Accept", "", False),
    (Answer.ACCEPT_FOR_SESSION.value, "Accept for session", "secondary", True),
    (Answer.DECLINE.value, "Decline", "secondary", False),
    (Answer.CANCEL.value, "Cancel run", "danger", False),
)
JUNIT_COUNTS = ("passed", "failed", "errors", "skipped", "total")
T = TypeVar("T")


# --- helpers ------------------------------------------------------------------------------------


def check_run_id(run_id: str) -> None:
    """NotFoundError unless `run_id` is a run id (a UUID)."""
    if not _is_uuid(run_id):
        raise NotFoundError(f"{run_id!r} is not a run id (run ids are UUIDs)")


def _is_uuid(text: str) -> bool:
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return True


_SHORT_ID = re.compile(r"[0-9a-f][0-9a-f-]{0,35}")


def _full_run_id(session: Session, given: str) -> str | None:
    """The run a short id (a unique prefix, as the runs table shows) names; None when `given`
    is no prefix at all. NotFoundError when no run or several runs start with it."""
    prefix = given.strip().lower()
    if not _SHORT_ID.fullmatch(prefix):
        return None
    found, _ = run_views_db.list_runs(session, run_views_db.RunFilter(id_prefix=prefix), limit=2)
    if not found:
        raise NotFoundError(f"no run id starts with {given!r}; the runs page lists them")
    if len(found) > 1:
        raise NotFoundError(f"run id prefix {given!r} matches several runs; give more of it")
    return str(found[0].id)


def _elapsed(started: datetime | None, finished: datetime | None, now: datetime) -> float | None:
    """How long something took, or has taken so far; None if it has not started."""
    if started is None:
        return None
    return max(0.0, ((finished or now) - started).total_seconds())


# --- static assets, login, logout ---------------------------------------------------------------


@router.get("/static/{name}")
def static_asset(name: str) -> Response:
    """The stylesheet and the live-status script (a fixed list: no path ever reaches the disk)."""
    media_type = _ASSETS.get(name)
    if media_type is None:
        return Response("not found", status_code=404, media_type="text/plain")
    content = (STATIC / name).read_bytes()
    return Response(content, media_type=media_type, headers={"Cache-Control": "max-age=300"})


@router.get("")
@router.get("/")
def home() -> RedirectResponse:
    return redirect("/ui/runs")


def _login_form(request: Request, problem: str = "", status_code: int = 200) -> HTMLResponse:
    return render(request, "login.html", "Log in", status_code=status_code, problem=problem)


@router.get("/login")
def login_page(request: Request) -> HTMLResponse:
    return _login_form(request)


@router.post("/login")
async def login(request: Request) -> Response:
    """Verify the token and keep it in the `ade_token` cookie."""
    token = (await posted_form(request)).get("token", "").strip()

    def check() -> bool:
        with services_of(request).session_factory.begin() as session:
            return tokens_db.authenticate(session, token) is not None

    if not token or not await run_in_threadpool(check):
        return _login_form(request, "That token is unknown or revoked.", status_code=401)
    response = redirect("/ui/runs")
    response.set_cookie(
        COOKIE,
        token,
        httponly=True,
        samesite="strict",
        path="/",
        secure=request.url.scheme == "https",
    )
    return response


@router.get("/logout")
def logout() -> RedirectResponse:
    """Forget the cookie (a GET is harmless here: SameSite=Strict keeps other sites out)."""
    response = redirect("/ui/login")
    response.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict")
    return response


# --- runs ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunLine:
    """A row of a runs table: the run, its duration, its rule's recent durations."""

    row: RunRow
    duration: str
    spark: charts.Sparkline | None


def run_lines(session: Session, rows: Sequence[RunRow]) -> list[RunLine]:
    """The runs with their durations and one sparkline query for all their rules."""
    recent = history.recent_durations(session, [r.rule_id for r in rows], SPARK_RUNS)
    now = utcnow()
    lines = []
    for row in rows:
        took = _elapsed(row.started_at, row.finished_at, now)
        shown = charts.duration_text(took)
        if took is not None and row.finished_at is None:
            shown += " so far"
        spark = charts.sparkline(recent.get(row.rule_id, []), current=row.id)
        lines.append(RunLine(row, shown, spark))
    return lines


@router.get("/runs")
def runs_page(
    request: Request,
    rule: str = "",
    status: str = "",
    queue_status: str = "",
    cursor: str = "",
) -> HTMLResponse:
    """The run history, newest first, with filters; active runs' status updates live."""
    try:
        filters = run_views_db.RunFilter(
            rule_id=rule or None, status=status or None, queue_status=queue_status or None
        )

        def load(session: Session) -> tuple[list[RunLine], str | None, list[str]]:
            rows, next_cursor = run_views_db.list_runs(
                session, filters, limit=PAGE_SIZE, cursor=cursor or None
            )
            rule_ids = [r.id for r in rules_db.list_rules(session)]
            return run_lines(session, rows), next_cursor, rule_ids

        lines, next_cursor, rule_ids = read(request, load)
    except AdeError as exc:
        return error_page(request, exc)
    given = (("rule", rule), ("status", status), ("queue_status", queue_status))
    query = {k: v for k, v in given if v}
    active = any(line.row.status in ACTIVE for line in lines) and not cursor
    poll = "/api/v1/runs?" + urlencode({**query, "limit": PAGE_SIZE})
    older = f"/ui/runs?{urlencode({**query, 'cursor': next_cursor})}" if next_cursor else ""
    return render(
        request, "runs.html", "Runs", live=active,
        lines=lines, poll=poll if active else None, older=older,
        rule_ids=rule_ids, rule=rule, status=status, queue_status=queue_status,
        statuses=[s.value for s in RunStatus], queue_statuses=[q.value for q in QueueStatus],
    )  # fmt: skip


@dataclass(frozen=True)
class StepView:
    """A step as its box shows it: the row, its duration and, for tests, the JUnit counts."""

    row: RunStepRow
    duration: str
    junit: dict[str, int] | None
    junit_note: str


def _step_view(step: RunStepRow, now: datetime) -> StepView:
    result = step.result or {}
    junit = None
    if step.action_type == "run-tests" and all(
        isinstance(result.get(k), int) for k in JUNIT_COUNTS
    ):
        junit = {k: int(result[k]) for k in JUNIT_COUNTS}
    note = result.get("junit", "") if step.action_type == "run-tests" else ""
    took = charts.duration_text(_elapsed(step.started_at, step.finished_at, now))
    return StepView(step, took, junit, note if isinstance(note, str) else "")


def _planned_steps(
    rule_row: RuleRow | None, run: RunRow, steps: Sequence[RunStepRow]
) -> list[tuple[str, str]]:
    """The rule's steps this run has not started yet, as (label, what), so a running run shows
    what is still to come. Only from the rule version the run runs (else nothing is known)."""
    if rule_row is None or rule_row.version != run.rule_version:
        return []
    rule = stored_rule(rule_row)
    if rule is None:
        return []
    seen = {step.index for step in steps}
    what = "not started" if run.status in ACTIVE else "not run"
    return [
        (f"{index + 1}. {action.id}", what)
        for index, action in enumerate(rule.execution.actions)
        if index not in seen and index > max(seen, default=-1)
    ]


class _RunView:
    """What a run page shows, read in one session."""

    def __init__(self, session: Session, run_id: str) -> None:
        self.run: RunRow = runs_db.get_run(session, run_id)
        self.steps: list[RunStepRow] = list(run_steps_db.list_steps(session, run_id))
        self.approvals: list[ApprovalRow] = list(approvals_db.approvals_of(session, run_id))
        # A running step's output shows in its box, not as transcript lines.
        self.events = [
            event
            for event in run_events_db.events_of(session, run_id)
            if event[0] != run_events_db.STEP_OUTPUT
        ]
        self.live = run_events_db.live_output(session, run_id)
        self.threads = threads_db.threads_of_run(session, run_id)
        try:
            rule_row: RuleRow | None = rules_db.get_rule(session, self.run.rule_id)
        except NotFoundError:  # the rule was deleted since: the run is still worth a page
            rule_row = None
        self.planned = _planned_steps(rule_row, self.run, self.steps)


@router.get("/runs/{run_id}")
def run_page(request: Request, run_id: str) -> Response:
    """One run: status (live while active), the step timeline, steps and output, JUnit counts,
    inputs, findings, agent threads, transcript."""
    try:
        if not _is_uuid(run_id):  # a short id, copied from a table or the CLI
            full = read(request, lambda session: _full_run_id(session, run_id))
            if full is not None:
                return redirect(f"/ui/runs/{full}")
        check_run_id(run_id)
        view = read(request, lambda session: _RunView(session, run_id))
    except AdeError as exc:
        return error_page(request, exc)
    run, now = view.run, utcnow()
    active = run.status in ACTIVE
    inputs = (run.trigger or {}).get("inputs") if run.trigger_type == "manual" else None
    shown_inputs = ", ".join(
        f"{k}={v if isinstance(v, str) else json.dumps(v)}"
        for k, v in sorted((inputs or {}).items())
    )
    spans = [
        charts.StepSpan(s.index, f"{s.index + 1}. {s.step_id}", s.status, s.started_at,
                        s.finished_at)
        for s in view.steps
    ]  # fmt: skip
    took = _elapsed(run.started_at, run.finished_at, now)
    duration = charts.duration_text(took) + (" so far" if active and took is not None else "")
    events = view.events[-MAX_EVENTS:]
    return render(
        request, "run.html", f"Run {run.id[:8]} of {run.rule_id}", live=active,
        run=run, signature=run.status + "|" + ",".join(step.status for step in view.steps),
        inputs=shown_inputs, duration=duration, actions=list(QUEUE_ACTIONS), active=active,
        retry_of=_retry_of(run), retry_key=uuid.uuid4().hex,
        approvals=view.approvals, answers=ANSWERS,
        timeline=charts.timeline(spans, view.planned, now),
        steps=[_step_view(step, now) for step in view.steps],
        events=events, events_total=len(view.events),
        events_skipped=len(view.events) - len(events), threads=view.threads,
        live_output=view.live,
    )  # fmt: skip


def _retry_of(run: RunRow) -> str | None:
    """The run this one retries, if it is a retry (`retry_of` in its trigger payload)."""
    given = (run.trigger or {}).get("retry_of")
    return given if isinstance(given, str) and _is_uuid(given) else None


@router.post("/inputs/{input_id}/answer")
async def answer_pending_input(request: Request, input_id: int) -> Response:
    """An operator's answer to a pending input; back to its run (or the inbox it came from)."""
    form = await posted_form(request)
    services = services_of(request)
    try:
        try:
            answer = Answer(form.get("answer", ""))
        except ValueError:
            known = ", ".join(a.value for a in Answer)
            raise InvalidInputError(f"answer must be one of {known}") from None
        _, run = await run_in_threadpool(
            answer_input, services.session_factory, services.sender, input_id, answer,
            by=actor(request, None), note=form.get("note") or None,
        )  # fmt: skip
    except AdeError as exc:
        return error_page(request, exc)
    return redirect(back_to(form, f"/ui/runs/{run.id}"))


@router.post("/runs/{run_id}/review")
async def move_run(request: Request, run_id: str) -> Response:
    """Move a finished run in the review queue (ignore, archive, approve)."""
    form = await posted_form(request)
    action = form.get("action", "")

    def move() -> None:
        check_run_id(run_id)
        target = QUEUE_ACTIONS.get(action)
        if target is None:
            known = ", ".join(QUEUE_ACTIONS)
            raise InvalidInputError(f"review action {action!r} is unknown; use one of {known}")
        with services_of(request).session_factory.begin() as session:
            runs_db.move_in_review_queue(session, run_id, target)

    try:
        await run_in_threadpool(move)
    except AdeError as exc:
        return error_page(request, exc)
    return redirect(back_to(form, f"/ui/runs/{run_id}"))


@router.get("/review")
def review_page(request: Request, queue_status: str = "") -> HTMLResponse:
    """The review queue: finished runs by queue status, with the moves for operators."""
    wanted = [queue_status] if queue_status else [q.value for q in OPEN_REVIEW]
    try:
        for value in wanted:
            if value not in {q.value for q in QueueStatus}:
                known = ", ".join(q.value for q in QueueStatus)
                raise InvalidInputError(f"queue status {value!r} is unknown; use one of {known}")

        def load(session: Session) -> list[tuple[str, list[RunLine]]]:
            found = []
            for value in wanted:
                rows, _ = run_views_db.list_runs(
                    session, run_views_db.RunFilter(queue_status=value), limit=PAGE_SIZE
                )
                found.append((value, run_lines(session, rows)))
            return found

        sections = read(request, load)
    except AdeError as exc:
        return error_page(request, exc)
    back = "/ui/review" + (f"?{urlencode({'queue_status': queue_status})}" if queue_status else "")
    return render(
        request, "review.html", "Review queue",
        sections=sections, back=back, actions=list(QUEUE_ACTIONS),
        queue_statuses=[q.value for q in QueueStatus],
    )  # fmt: skip
