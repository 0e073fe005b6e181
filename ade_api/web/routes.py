"""The run-history web page: server-rendered HTML under `/ui`, no build step.

Pages: the runs list (filters, live status), a run (steps with output, transcript, findings,
pending inputs with their answer buttons, review-queue moves), the review queue, the rules (next
fire times, recent occurrences) and a rule's "Run now" form generated from its typed inputs.
Every value that comes from data is HTML-escaped (`_e`); the pages carry a strict
Content-Security-Policy (scripts and styles only from `/ui/static`, no framing), so even a
missed escape could not run a script. Live status is a few lines of vanilla JS
(`static/live.js`) polling the JSON API, which the same cookie authenticates.

Authentication is `ade_api.auth.AuthMiddleware`'s: the login form posts a token to `/ui/login`,
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

import html
import json
import logging
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlencode
from zoneinfo import ZoneInfo

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from ade_api.auth import COOKIE, Principal, actor
from ade_api.deps import Services
from ade_api.problems import retry_after, status_of
from ade_tasks.approvals import answer_input
from ade_tasks.db import approvals as approvals_db
from ade_tasks.db import occurrences as occ_db
from ade_tasks.db import rules as rules_db
from ade_tasks.db import runs as runs_db
from ade_tasks.db import tokens as tokens_db
from ade_tasks.db.schema import (
    Answer,
    ApprovalRow,
    ApprovalStatus,
    QueueStatus,
    Role,
    RuleRow,
    RunRow,
    RunStatus,
    RunStepRow,
    utcnow,
)
from ade_tasks.dispatch import TriggerEvent, dispatch_retrying
from ade_tasks.errors import AdeError, InvalidInputError, NotFoundError
from ade_tasks.review import QUEUE_ACTIONS
from ade_tasks.rules.models import InputSpec, Rule, ScheduleTrigger
from ade_tasks.scheduling import rule_schedules

log = logging.getLogger(__name__)

router = APIRouter(prefix="/ui", include_in_schema=False)

STATIC = Path(__file__).parent / "static"
_ASSETS = {"style.css": "text/css; charset=utf-8", "live.js": "text/javascript; charset=utf-8"}
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
PAGE_SIZE = 50
MAX_EVENTS = 500
MAX_EVENT_CHARS = 4000
NEXT_FIRES = 5
OCCURRENCES = 10
ACTIVE = frozenset({RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.WAITING})
OPEN_REVIEW = (
    QueueStatus.PENDING_REVIEW,
    QueueStatus.ACTIONABLE_FINDINGS,
    QueueStatus.VERIFICATION_REQUIRED,
)
T = TypeVar("T")


# --- rendering helpers --------------------------------------------------------------------------


def _e(value: object) -> str:
    """HTML-escape anything (quotes too, so it is safe in attributes)."""
    return html.escape("" if value is None else str(value), quote=True)


def _when(value: datetime | None) -> str:
    return "" if value is None else _e(value.strftime("%Y-%m-%d %H:%M:%S UTC"))


def _status(status: str) -> str:
    return f'<span class="status status-{_e(status)}">{_e(status)}</span>'


def _principal(request: Request) -> Principal | None:
    principal: Principal | None = getattr(request.state, "principal", None)
    return principal


def _can_act(request: Request) -> bool:
    """May the caller change things (operator or admin)? Only then are the buttons shown."""
    principal = _principal(request)
    return principal is not None and principal.role.rank >= Role.OPERATOR.rank


def _services(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


def _page(
    request: Request, title: str, body: str, *, status_code: int = 200, live: bool = False
) -> HTMLResponse:
    principal = _principal(request)
    nav = ""
    if principal is not None:
        nav = (
            '<a href="/ui/runs">Runs</a><a href="/ui/review">Review queue</a>'
            '<a href="/ui/rules">Rules</a>'
            f'<span class="who">{_e(principal.name)} ({_e(principal.role.value)})</span>'
            '<a href="/ui/logout">Log out</a>'
        )
    script = '<script src="/ui/static/live.js" defer></script>' if live else ""
    document = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{_e(title)} · ADE Tasks</title>
<link rel="stylesheet" href="/ui/static/style.css">{script}
</head><body>
<header><strong>ADE Tasks</strong>{nav}</header>
<main>
<h1>{_e(title)}</h1>
{body}
</main></body></html>
"""
    return HTMLResponse(document, status_code=status_code, headers=SECURITY_HEADERS)


def _error_page(request: Request, exc: AdeError) -> HTMLResponse:
    code, title = status_of(exc) or (500, "Error")
    if code == 500:
        log.error("web page: unhandled ADE error: %s", exc)
    body = (
        f'<div class="error"><p>{_e(exc.message)}</p></div>'
        '<p><a href="/ui/runs">Back to the runs</a></p>'
    )
    page = _page(request, title, body, status_code=code)
    page.headers.update(retry_after(code))  # a 503 (database, broker): when to try again
    return page


def error_page(request: Request, exc: AdeError) -> HTMLResponse:
    """The page for an error met outside a page's own handling (ade_api.db_faults)."""
    return _error_page(request, exc)


def _redirect(url: str) -> RedirectResponse:
    return RedirectResponse(url, status_code=303, headers={"Cache-Control": "no-store"})


def _read(request: Request, work: Callable[[Any], T]) -> T:
    """Run `work(session)` in a read-only session."""
    with _services(request).session_factory() as session:
        return work(session)


async def _form(request: Request) -> dict[str, str]:
    """The posted urlencoded form (the last value of a repeated field wins)."""
    body = (await request.body()).decode("utf-8", errors="replace")
    return dict(parse_qsl(body, keep_blank_values=True))


def _back(form: Mapping[str, str], default: str) -> str:
    """Where to return after a POST: a `/ui/` path the form named, else `default`."""
    target = form.get("back", "")
    ok = target.startswith("/ui/") and "//" not in target and "\\" not in target
    return target if ok else default


def _check_run_id(run_id: str) -> None:
    try:
        uuid.UUID(run_id)
    except ValueError:
        raise NotFoundError(f"run id {run_id!r} is not a run id (run ids are UUIDs)") from None


def _json(value: Any, limit: int = MAX_EVENT_CHARS) -> str:
    text = json.dumps(value, indent=2, sort_keys=True, default=str)
    return text if len(text) <= limit else text[:limit] + f"\n… ({len(text) - limit} more chars)"


def _select(name: str, options: Iterable[str], chosen: str | None, blank: str = "any") -> str:
    items = [f'<option value="">{_e(blank)}</option>'] if blank else []
    for option in options:
        selected = " selected" if option == chosen else ""
        items.append(f'<option value="{_e(option)}"{selected}>{_e(option)}</option>')
    return f'<select name="{_e(name)}" id="f-{_e(name)}">{"".join(items)}</select>'


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
    return _redirect("/ui/runs")


def _login_form(request: Request, problem: str = "", status_code: int = 200) -> HTMLResponse:
    error = f'<div class="error" id="login-error">{_e(problem)}</div>' if problem else ""
    body = f"""{error}
<form class="run" method="post" action="/ui/login">
  <label for="token">API token <small>from <code>ade-tasks tokens create</code></small>
    <input type="password" id="token" name="token" autocomplete="off" required size="50"></label>
  <button type="submit" id="login">Log in</button>
</form>"""
    return _page(request, "Log in", body, status_code=status_code)


@router.get("/login")
def login_page(request: Request) -> HTMLResponse:
    return _login_form(request)


@router.post("/login")
async def login(request: Request) -> Response:
    """Verify the token and keep it in the `ade_token` cookie."""
    token = (await _form(request)).get("token", "").strip()

    def check() -> bool:
        with _services(request).session_factory.begin() as session:
            return tokens_db.authenticate(session, token) is not None

    if not token or not await run_in_threadpool(check):
        return _login_form(request, "That token is unknown or revoked.", status_code=401)
    response = _redirect("/ui/runs")
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
    response = _redirect("/ui/login")
    response.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict")
    return response


# --- runs ---------------------------------------------------------------------------------------


def _runs_table(
    rows: Sequence[RunRow], *, poll: str | None = None, actions: str = "", back: str = ""
) -> str:
    if not rows:
        return '<p class="muted">No runs.</p>'
    live = f' data-live-list data-poll="{_e(poll)}"' if poll else ""
    head = (
        "<tr><th>Run</th><th>Rule</th><th>Status</th><th>Trigger</th><th>Queued</th>"
        "<th>Finished</th><th>Review</th>" + ("<th></th>" if actions else "") + "</tr>"
    )
    lines = []
    for row in rows:
        buttons = _review_buttons(row, back) if actions else ""
        lines.append(
            f'<tr data-run="{_e(row.id)}">'
            f'<td><a href="/ui/runs/{_e(row.id)}">{_e(row.id[:8])}</a></td>'
            f'<td><a href="/ui/rules/{_e(row.rule_id)}">{_e(row.rule_id)}</a></td>'
            f'<td class="status status-{_e(row.status)}">{_e(row.status)}</td>'
            f"<td>{_e(row.trigger_summary or row.trigger_type)}</td>"
            f"<td>{_when(row.queued_at)}</td><td>{_when(row.finished_at)}</td>"
            f"<td>{_e(row.queue_status or '')}</td>"
            + (f"<td>{buttons}</td>" if actions else "")
            + "</tr>"
        )
    return f'<table id="runs"{live}>{head}{"".join(lines)}</table>'


def _review_buttons(row: RunRow, back: str) -> str:
    if row.queue_status is None:
        return ""
    forms = []
    for action in QUEUE_ACTIONS:
        forms.append(
            f'<form class="inline" method="post" action="/ui/runs/{_e(row.id)}/review">'
            f'<input type="hidden" name="action" value="{_e(action)}">'
            f'<input type="hidden" name="back" value="{_e(back)}">'
            f'<button type="submit" class="secondary" name="move" value="{_e(action)}">'
            f"{_e(action.capitalize())}</button></form>"
        )
    return " ".join(forms)


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
        filters = runs_db.RunFilter(
            rule_id=rule or None, status=status or None, queue_status=queue_status or None
        )

        def load(session: Any) -> tuple[Sequence[RunRow], str | None, list[str]]:
            rows, next_cursor = runs_db.list_runs(
                session, filters, limit=PAGE_SIZE, cursor=cursor or None
            )
            rule_ids = [r.id for r in rules_db.list_rules(session)]
            return rows, next_cursor, rule_ids

        rows, next_cursor, rule_ids = _read(request, load)
    except AdeError as exc:
        return _error_page(request, exc)
    given = (("rule", rule), ("status", status), ("queue_status", queue_status))
    query = {k: v for k, v in given if v}
    poll = "/api/v1/runs?" + urlencode({**query, "limit": PAGE_SIZE})
    active = any(row.status in ACTIVE for row in rows) and not cursor
    body = f"""<form class="filters" method="get" action="/ui/runs">
  <label for="f-rule">Rule {_select("rule", rule_ids, rule)}</label>
  <label for="f-status">Status {_select("status", [s.value for s in RunStatus], status)}</label>
  <label for="f-queue_status">Review {
        _select("queue_status", [q.value for q in QueueStatus], queue_status)
    }</label>
  <button type="submit">Filter</button> <a href="/ui/runs">Clear</a>
</form>
{_runs_table(rows, poll=poll if active else None)}"""
    if next_cursor:
        more = urlencode({**query, "cursor": next_cursor})
        body += f'<p><a href="/ui/runs?{_e(more)}" id="older">Older runs</a></p>'
    return _page(request, "Runs", body, live=active)


class _RunView:
    """What a run page shows, read in one session."""

    def __init__(self, session: Any, run_id: str) -> None:
        self.run: RunRow = runs_db.get_run(session, run_id)
        self.steps: list[RunStepRow] = list(runs_db.list_steps(session, run_id))
        self.approvals: list[ApprovalRow] = list(approvals_db.approvals_of(session, run_id))
        self.events = runs_db.events_of(session, run_id)


@router.get("/runs/{run_id}")
def run_page(request: Request, run_id: str) -> HTMLResponse:
    """One run: status (live while active), steps and output, inputs, findings, transcript."""
    try:
        _check_run_id(run_id)
        view = _read(request, lambda session: _RunView(session, run_id))
    except AdeError as exc:
        return _error_page(request, exc)
    run, can_act = view.run, _can_act(request)
    back = f"/ui/runs/{run.id}"
    active = run.status in ACTIVE
    signature = run.status + "|" + ",".join(step.status for step in view.steps)
    live = (
        f' data-live-run data-poll="/api/v1/runs/{_e(run.id)}" data-signature="{_e(signature)}"'
        if active
        else ""
    )
    parts = [
        '<div class="box"><dl class="kv">',
        f'<dt>Status</dt><dd><span id="run-status" class="status status-{_e(run.status)}"'
        f"{live}>{_e(run.status)}</span></dd>",
        f'<dt>Rule</dt><dd><a href="/ui/rules/{_e(run.rule_id)}">{_e(run.rule_id)}</a>'
        f" v{_e(run.rule_version)}</dd>",
        f"<dt>Trigger</dt><dd>{_e(run.trigger_summary or run.trigger_type)}</dd>",
    ]
    inputs = (run.trigger or {}).get("inputs") if run.trigger_type == "manual" else None
    if inputs:
        shown = ", ".join(
            f"{k}={v if isinstance(v, str) else json.dumps(v)}" for k, v in sorted(inputs.items())
        )
        parts.append(f'<dt>Inputs</dt><dd id="run-inputs">{_e(shown)}</dd>')
    parts += [
        f"<dt>Queue</dt><dd>{_e(run.queue)} (attempt {_e(run.attempt)})</dd>",
        f"<dt>Queued</dt><dd>{_when(run.queued_at)}</dd>",
        f"<dt>Started</dt><dd>{_when(run.started_at)}</dd>",
        f"<dt>Finished</dt><dd>{_when(run.finished_at)}</dd>",
        f'<dt>Review</dt><dd id="run-review">{_e(run.queue_status or "not in the queue")}</dd>',
    ]
    if run.confidence is not None:
        parts.append(f"<dt>Confidence</dt><dd>{_e(f'{run.confidence:.2f}')}</dd>")
    parts.append("</dl></div>")
    if run.error:
        parts.append(f'<div class="error" id="run-error">{_e(run.error)}</div>')
    if can_act and run.queue_status is not None:
        parts.append(f'<div id="review-actions">Review: {_review_buttons(run, back)}</div>')
    parts.append(_inputs_section(view.approvals, can_act))
    parts.append(_steps_section(view.steps))
    parts.append(_findings_section(run.findings))
    parts.append(_transcript_section(view.events))
    return _page(request, f"Run {run.id[:8]} of {run.rule_id}", "\n".join(parts), live=active)


def _inputs_section(approvals: Sequence[ApprovalRow], can_act: bool) -> str:
    if not approvals:
        return ""
    items = []
    for row in approvals:
        what = f"tool call {row.tool}" if row.tool else f"before step {row.step_index + 1}"
        details = f"<pre>{_e(_json(row.arguments))}</pre>" if row.arguments else ""
        if row.status == ApprovalStatus.PENDING:
            buttons = _answer_form(row) if can_act else ""
            items.append(
                f'<div class="box pending-input" id="input-{_e(row.id)}">'
                f"<strong>Waiting for an answer</strong> ({_e(what)}): {_e(row.reason)}"
                f"{details}{buttons}</div>"
            )
        else:
            by = f" by {row.decided_by}" if row.decided_by else ""
            note = f": {row.note}" if row.note else ""
            items.append(
                f'<div class="box">{_e(what)}: {_e(row.reason)} — '
                f"<strong>{_e(row.answer or row.status)}</strong>{_e(by)}{_e(note)}</div>"
            )
    return "<h2>Inputs</h2>" + "".join(items)


def _answer_form(row: ApprovalRow) -> str:
    answers = [(Answer.ACCEPT, "Accept", "")]
    if row.tool_call_id:  # "for the session" means nothing for a gate before a step
        answers.append((Answer.ACCEPT_FOR_SESSION, "Accept for session", "secondary"))
    answers += [(Answer.DECLINE, "Decline", "secondary"), (Answer.CANCEL, "Cancel run", "danger")]
    buttons = " ".join(
        f'<button type="submit" name="answer" value="{_e(answer.value)}" class="{css}">'
        f"{_e(label)}</button>"
        for answer, label, css in answers
    )
    return (
        f'<form method="post" action="/ui/inputs/{_e(row.id)}/answer" class="answer">'
        '<label>Note <input type="text" name="note" size="40"></label> '
        f"{buttons}</form>"
    )


def _steps_section(steps: Sequence[RunStepRow]) -> str:
    if not steps:
        return '<h2>Steps</h2><p class="muted">No step has run yet.</p>'
    items = []
    for step in steps:
        exit_code = "" if step.exit_code is None else f" exit={step.exit_code}"
        error = f'<div class="error">{_e(step.error)}</div>' if step.error else ""
        output = f"<pre>{_e(step.output)}</pre>" if step.output else ""
        items.append(
            f'<div class="box step" id="step-{_e(step.index)}">'
            f"<strong>{_e(step.index + 1)}. {_e(step.step_id)}</strong> "
            f'<span class="muted">({_e(step.action_type)})</span> {_status(step.status)}'
            f"{_e(exit_code)}{error}{output}</div>"
        )
    return "<h2>Steps</h2>" + "".join(items)


def _findings_section(findings: list[dict[str, Any]] | None) -> str:
    if not findings:
        return ""
    items = []
    for finding in findings:
        pairs = "".join(
            f"<dt>{_e(key)}</dt><dd>{_e(value if isinstance(value, str) else _json(value))}</dd>"
            for key, value in finding.items()
        )
        items.append(f'<div class="box finding"><dl class="kv">{pairs}</dl></div>')
    return f"<h2>Findings ({len(findings)})</h2>" + "".join(items)


def _transcript_section(events: Sequence[tuple[str, dict[str, Any]]]) -> str:
    if not events:
        return ""
    shown = events[-MAX_EVENTS:]
    skipped = len(events) - len(shown)
    note = f'<p class="muted">{skipped} earlier events not shown.</p>' if skipped else ""
    lines = "".join(
        f"<tr><td><code>{_e(kind)}</code></td><td><pre>{_e(_json(data))}</pre></td></tr>"
        for kind, data in shown
    )
    return (
        f"<h2>Transcript ({len(events)} events)</h2>{note}"
        f'<table id="transcript"><tr><th>Event</th><th>Data</th></tr>{lines}</table>'
    )


@router.post("/inputs/{input_id}/answer")
async def answer_pending_input(request: Request, input_id: int) -> Response:
    """An operator's answer to a pending input; back to its run."""
    form = await _form(request)
    services = _services(request)
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
        return _error_page(request, exc)
    return _redirect(f"/ui/runs/{run.id}")


@router.post("/runs/{run_id}/review")
async def move_run(request: Request, run_id: str) -> Response:
    """Move a finished run in the review queue (ignore, archive, approve)."""
    form = await _form(request)
    action = form.get("action", "")

    def move() -> None:
        _check_run_id(run_id)
        target = QUEUE_ACTIONS.get(action)
        if target is None:
            known = ", ".join(QUEUE_ACTIONS)
            raise InvalidInputError(f"review action {action!r} is unknown; use one of {known}")
        with _services(request).session_factory.begin() as session:
            runs_db.move_in_review_queue(session, run_id, target)

    try:
        await run_in_threadpool(move)
    except AdeError as exc:
        return _error_page(request, exc)
    return _redirect(_back(form, f"/ui/runs/{run_id}"))


@router.get("/review")
def review_page(request: Request, queue_status: str = "") -> HTMLResponse:
    """The review queue: finished runs by queue status, with the moves for operators."""
    wanted = [queue_status] if queue_status else [q.value for q in OPEN_REVIEW]
    try:
        for value in wanted:
            if value not in {q.value for q in QueueStatus}:
                raise InvalidInputError(f"queue status {value!r} is unknown")

        def load(session: Any) -> list[tuple[str, Sequence[RunRow]]]:
            found = []
            for value in wanted:
                rows, _ = runs_db.list_runs(
                    session, runs_db.RunFilter(queue_status=value), limit=PAGE_SIZE
                )
                found.append((value, rows))
            return found

        sections = _read(request, load)
    except AdeError as exc:
        return _error_page(request, exc)
    back = "/ui/review" + (f"?{urlencode({'queue_status': queue_status})}" if queue_status else "")
    links = " · ".join(
        f'<a href="/ui/review?queue_status={_e(q.value)}">{_e(q.value)}</a>' for q in QueueStatus
    )
    parts = [f'<p>Show: <a href="/ui/review">open</a> · {links}</p>']
    actions = "yes" if _can_act(request) else ""
    for value, rows in sections:
        parts.append(f'<h2 id="queue-{_e(value)}">{_e(value)} ({len(rows)})</h2>')
        parts.append(_runs_table(rows, actions=actions, back=back))
    return _page(request, "Review queue", "\n".join(parts))


# --- rules --------------------------------------------------------------------------------------


def _load(row: RuleRow) -> Rule | None:
    try:
        return rules_db.load_rule(row)
    except Exception:  # a stored document this version cannot read: show the row, not a 500
        log.exception("web page: could not load rule %s", row.id)
        return None


def _next_fires(rule: Rule, count: int) -> list[tuple[ScheduleTrigger, list[datetime], str]]:
    """The next fire times of each schedule trigger in its zone, or the trigger's problem, as
    GET /rules/{id}/schedule computes them (a trigger that cannot fire shows why, not a 500)."""
    found = []
    for schedule in rule_schedules(rule, utcnow(), count):
        zone = ZoneInfo(schedule.trigger.timezone) if schedule.times else None
        times = [t.astimezone(zone) for t in schedule.times]
        found.append((schedule.trigger, times, schedule.problem or ""))
    return found


def _trigger_types(rule: Rule) -> str:
    return ", ".join(str(getattr(t, "type", "?")) for t in rule.triggers)


@router.get("/rules")
def rules_page(request: Request) -> HTMLResponse:
    """Every rule: enabled, triggers, the next fire time, the last occurrence."""

    def load(session: Any) -> list[tuple[RuleRow, Rule | None, Sequence[Any]]]:
        return [
            (row, _load(row), occ_db.list_for_rule(session, row.id, 1))
            for row in rules_db.list_rules(session)
        ]

    rows = _read(request, load)
    can_act = _can_act(request)
    lines = []
    for row, rule, last in rows:
        fires = _next_fires(rule, 1) if rule else []
        upcoming = min((times[0] for _, times, _ in fires if times), default=None)
        problems = "".join(
            f'<br><span class="problem status-failed">{_e(problem)}</span>'
            for _, _, problem in fires
            if problem
        )
        occurrence = f"{_when(last[0].slot)} {_e(last[0].outcome)}" if last else ""
        run_now = (
            f' <a href="/ui/rules/{_e(row.id)}/run" class="run-now">Run now</a>'
            if can_act and rule
            else ""
        )
        lines.append(
            f'<tr data-rule="{_e(row.id)}"><td><a href="/ui/rules/{_e(row.id)}">{_e(row.id)}</a>'
            f"{run_now}</td><td>{_e(rule.name if rule else '')}</td>"
            f"<td>{'enabled' if row.enabled else 'disabled'}"
            f"{'' if row.trust_state == 'trusted' else ' · ' + _e(row.trust_state)}</td>"
            f"<td>{_e(_trigger_types(rule) if rule else 'unreadable document')}</td>"
            f"<td>{_e(upcoming.isoformat(' ', 'minutes') if upcoming else '')}{problems}</td>"
            f"<td>{occurrence}</td></tr>"
        )
    body = (
        '<table id="rules"><tr><th>Rule</th><th>Name</th><th>State</th><th>Triggers</th>'
        f"<th>Next fire</th><th>Last occurrence</th></tr>{''.join(lines)}</table>"
        if lines
        else '<p class="muted">No rules; sync a rules directory with `ade-tasks rules sync`.</p>'
    )
    return _page(request, "Rules", body)


@router.get("/rules/{rule_id}")
def rule_page(request: Request, rule_id: str) -> HTMLResponse:
    """One rule: triggers, inputs, next fire times, recent occurrences, recent runs."""

    def load(session: Any) -> tuple[RuleRow, Sequence[Any], Sequence[RunRow]]:
        row = rules_db.get_rule(session, rule_id)
        occurrences = occ_db.list_for_rule(session, rule_id, OCCURRENCES)
        runs, _ = runs_db.list_runs(session, runs_db.RunFilter(rule_id=rule_id), limit=10)
        return row, occurrences, runs

    try:
        row, occurrences, runs = _read(request, load)
    except AdeError as exc:
        return _error_page(request, exc)
    rule = _load(row)
    parts = ['<div class="box"><dl class="kv">']
    if rule is not None:
        parts.append(f"<dt>Name</dt><dd>{_e(rule.name)}</dd>")
        if rule.description:
            parts.append(f"<dt>Description</dt><dd>{_e(rule.description)}</dd>")
    parts += [
        f"<dt>Version</dt><dd>{_e(row.version)}</dd>",
        f"<dt>Enabled</dt><dd>{'yes' if row.enabled else 'no'}</dd>",
        f"<dt>Trust</dt><dd>{_e(row.trust_state)}</dd>",
        f"<dt>Source</dt><dd>{_e(row.source_file or row.source)}</dd>",
    ]
    if rule is not None:
        parts.append(f"<dt>Triggers</dt><dd>{_e(_trigger_types(rule))}</dd>")
        if rule.inputs:
            shown = ", ".join(f"{n} ({rule.inputs[n].type})" for n in sorted(rule.inputs))
            parts.append(f"<dt>Inputs</dt><dd>{_e(shown)}</dd>")
    parts.append("</dl></div>")
    if rule is not None and _can_act(request):
        parts.append(f'<p><a href="/ui/rules/{_e(row.id)}/run" id="run-now">Run now</a></p>')
    fires = _next_fires(rule, NEXT_FIRES) if rule else []
    if fires:
        parts.append("<h2>Next fire times</h2>")
        for trigger, times, problem in fires:
            listed = "".join(f"<li>{_e(t.isoformat(' ', 'minutes'))}</li>" for t in times)
            shown = f'<p class="problem error">{_e(problem)}</p>' if problem else ""
            parts.append(
                f"<p><code>{_e(trigger.cron)}</code> ({_e(trigger.timezone)})</p>{shown}"
                f'<ul class="fires">{listed}</ul>'
            )
    if occurrences:
        lines = "".join(
            f"<tr><td>{_when(o.slot)}</td><td><code>{_e(o.cron)}</code></td>"
            f"<td>{_e(o.outcome)}</td><td>"
            + (f'<a href="/ui/runs/{_e(o.run_id)}">{_e(o.run_id[:8])}</a>' if o.run_id else "")
            + f"</td><td>{_e(o.reason or '')}</td></tr>"
            for o in occurrences
        )
        parts.append(
            '<h2>Recent occurrences</h2><table id="occurrences"><tr><th>Slot</th><th>Cron</th>'
            f"<th>Outcome</th><th>Run</th><th>Reason</th></tr>{lines}</table>"
        )
    parts.append("<h2>Recent runs</h2>" + _runs_table(runs))
    return _page(request, f"Rule {row.id}", "\n".join(parts))


def _input_field(name: str, spec: InputSpec) -> str:
    field = f"in.{name}"
    ident = f"input-{name}"
    required = " required" if spec.required and spec.default is None else ""
    default: str | bool | float = "" if spec.default is None else spec.default
    if isinstance(default, float) and default.is_integer():
        default = int(default)  # a YAML `1` arrives as 1.0
    hint = f"<small>{_e(spec.description)}</small>" if spec.description else ""
    if spec.type == "boolean":
        checked = " checked" if default is True or str(default).lower() == "true" else ""
        control = (
            f'<input type="hidden" name="{_e(field)}" value="false">'
            f'<input type="checkbox" id="{_e(ident)}" name="{_e(field)}" value="true"{checked}>'
        )
    elif spec.type == "choice":
        items = [] if spec.default is not None or spec.required else ['<option value=""></option>']
        for option in spec.options:
            selected = " selected" if option == str(default) else ""
            items.append(f'<option value="{_e(option)}"{selected}>{_e(option)}</option>')
        options = "".join(items)
        control = f'<select id="{_e(ident)}" name="{_e(field)}"{required}>{options}</select>'
    elif spec.type == "number":
        control = (
            f'<input type="number" step="any" id="{_e(ident)}" name="{_e(field)}" '
            f'value="{_e(default)}"{required}>'
        )
    else:
        control = (
            f'<input type="text" id="{_e(ident)}" name="{_e(field)}" value="{_e(default)}" '
            f'size="50"{required}>'
        )
    return f'<label for="{_e(ident)}">{_e(name)} ({_e(spec.type)}) {hint} {control}</label>'


@router.get("/rules/{rule_id}/run")
def run_form(request: Request, rule_id: str) -> HTMLResponse:
    """The "Run now" form, one field per typed input of the rule."""
    try:
        row = _read(request, lambda session: rules_db.get_rule(session, rule_id))
    except AdeError as exc:
        return _error_page(request, exc)
    rule = _load(row)
    if rule is None:
        return _error_page(request, InvalidInputError(f"rule {rule_id!r} cannot be read"))
    if not _can_act(request):
        body = '<p class="muted">Starting a run needs an operator token.</p>'
        return _page(request, f"Run {rule.id}", body, status_code=403)
    fields = [_input_field(name, rule.inputs[name]) for name in sorted(rule.inputs)]
    if not rule.inputs:
        fields.append(
            '<label for="extra">Inputs <small>optional, one name=value a line</small>'
            '<textarea id="extra" name="extra" rows="3" cols="50"></textarea></label>'
        )
    key = uuid.uuid4().hex  # a double submit of this form starts one run, not two
    body = f"""<p>{_e(rule.description or rule.name)}</p>
<form class="run" method="post" action="/ui/rules/{_e(rule.id)}/runs" id="run-form">
  <input type="hidden" name="key" value="{_e(key)}">
  {"".join(fields)}
  <button type="submit" id="start-run">Run now</button>
</form>"""
    return _page(request, f"Run {rule.id}", body)


def _posted_inputs(form: Mapping[str, str]) -> dict[str, Any]:
    """The form's inputs: `in.<name>` fields (empty ones left to the rule's defaults) and the
    free-form `extra` lines of a rule that declares none."""
    inputs: dict[str, Any] = {
        key[3:]: value for key, value in form.items() if key.startswith("in.") and value != ""
    }
    for line in form.get("extra", "").splitlines():
        if not line.strip():
            continue
        name, sep, value = line.partition("=")
        if not sep or not name.strip():
            raise InvalidInputError(f"input line {line!r} is not name=value")
        inputs[name.strip()] = value.strip()
    return inputs


@router.post("/rules/{rule_id}/runs")
async def start_run(request: Request, rule_id: str) -> Response:
    """Start a manual run like `POST /api/v1/rules/{id}/runs`, then show it."""
    form = await _form(request)
    services = _services(request)
    try:
        inputs = _posted_inputs(form)
        key = form.get("key") or None
        own = f"ui:{key[:64]}" if key else f"request:{uuid.uuid4().hex}"
        trigger = TriggerEvent.manual(inputs, key=own, by=actor(request, None))
        result = await run_in_threadpool(
            partial(
                dispatch_retrying,
                own_key=not key,
                automations_disabled=services.settings.disable_automations,
            ),
            services.session_factory, services.sender, rule_id, trigger,
        )  # fmt: skip
    except AdeError as exc:
        return _error_page(request, exc)
    return _redirect(f"/ui/runs/{result.run.id}")
