"""The run-history web page: server-rendered HTML under `/ui`, no build step.

Pages: the runs list (filters, live status, each run's duration beside a sparkline of its
rule's recent durations), a run (a Gantt timeline of its steps, live while it runs; each step's
output and JUnit counts; transcript, findings, pending inputs with their answer buttons,
review-queue moves), the review queue, the rules, a rule (runs per day by outcome and p50/p95
duration over the last 30 days, next fire times, recent occurrences with what came of them)
and the "Run now" form of a rule with a manual trigger, generated from its typed inputs.

Python builds data here; the Jinja2 templates in `templates/` build the markup, with autoescape
on for all of them (`ade_api.web.pages`), and the charts are inline SVG drawn on the server
(`ade_api.web.charts`), so every page reads the same without JavaScript. The pages carry a
strict Content-Security-Policy (scripts and styles only from `/ui/static`, no framing), so even
a missed escape could not run a script. Live status is a few lines of vanilla JS
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

import json
import logging
import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlencode
from zoneinfo import ZoneInfo

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from ade_api.auth import COOKIE, actor
from ade_api.deps import Services
from ade_api.problems import retry_after, status_of
from ade_api.web import charts
from ade_api.web.pages import can_act, render
from ade_tasks.approvals import answer_input
from ade_tasks.clock import utcnow
from ade_tasks.db import approvals as approvals_db
from ade_tasks.db import history
from ade_tasks.db import occurrences as occ_db
from ade_tasks.db import rules as rules_db
from ade_tasks.db import runs as runs_db
from ade_tasks.db import tokens as tokens_db
from ade_tasks.db.schema import ApprovalRow, RuleRow, RunRow, RunStepRow
from ade_tasks.dispatch import TriggerEvent, dispatch_retrying
from ade_tasks.errors import AdeError, InvalidInputError, NotFoundError
from ade_tasks.review import QUEUE_ACTIONS
from ade_tasks.rules.models import InputSpec, ManualTrigger, Rule, ScheduleTrigger
from ade_tasks.scheduling import rule_schedules
from ade_tasks.states import Answer, QueueStatus, RunStatus

log = logging.getLogger(__name__)

router = APIRouter(prefix="/ui", include_in_schema=False)

STATIC = Path(__file__).parent / "static"
_ASSETS = {"style.css": "text/css; charset=utf-8", "live.js": "text/javascript; charset=utf-8"}
PAGE_SIZE = 50
MAX_EVENTS = 500
NEXT_FIRES = 5
OCCURRENCES = 10
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


def _services(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


def _error_page(request: Request, exc: AdeError) -> HTMLResponse:
    code, title = status_of(exc) or (500, "Error")
    if code == 500:
        log.error("web page: unhandled ADE error: %s", exc)
    page = render(request, "error.html", title, status_code=code, message=exc.message)
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
    if not _is_uuid(run_id):
        raise NotFoundError(f"{run_id!r} is not a run id (run ids are UUIDs)")


def _is_uuid(text: str) -> bool:
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return True


_SHORT_ID = re.compile(r"[0-9a-f][0-9a-f-]{0,35}")


def _full_run_id(session: Any, given: str) -> str | None:
    """The run a short id (a unique prefix, as the runs table shows) names; None when `given`
    is no prefix at all. NotFoundError when no run or several runs start with it."""
    prefix = given.strip().lower()
    if not _SHORT_ID.fullmatch(prefix):
        return None
    found, _ = runs_db.list_runs(session, runs_db.RunFilter(id_prefix=prefix), limit=2)
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
    return _redirect("/ui/runs")


def _login_form(request: Request, problem: str = "", status_code: int = 200) -> HTMLResponse:
    return render(request, "login.html", "Log in", status_code=status_code, problem=problem)


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


@dataclass(frozen=True)
class RunLine:
    """A row of a runs table: the run, its duration, its rule's recent durations."""

    row: RunRow
    duration: str
    spark: charts.Sparkline | None


def _run_lines(session: Any, rows: Sequence[RunRow]) -> list[RunLine]:
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
        filters = runs_db.RunFilter(
            rule_id=rule or None, status=status or None, queue_status=queue_status or None
        )

        def load(session: Any) -> tuple[list[RunLine], str | None, list[str]]:
            rows, next_cursor = runs_db.list_runs(
                session, filters, limit=PAGE_SIZE, cursor=cursor or None
            )
            rule_ids = [r.id for r in rules_db.list_rules(session)]
            return _run_lines(session, rows), next_cursor, rule_ids

        lines, next_cursor, rule_ids = _read(request, load)
    except AdeError as exc:
        return _error_page(request, exc)
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
    rule = _load(rule_row)
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

    def __init__(self, session: Any, run_id: str) -> None:
        self.run: RunRow = runs_db.get_run(session, run_id)
        self.steps: list[RunStepRow] = list(runs_db.list_steps(session, run_id))
        self.approvals: list[ApprovalRow] = list(approvals_db.approvals_of(session, run_id))
        self.events = runs_db.events_of(session, run_id)
        try:
            rule_row: RuleRow | None = rules_db.get_rule(session, self.run.rule_id)
        except NotFoundError:  # the rule was deleted since: the run is still worth a page
            rule_row = None
        self.planned = _planned_steps(rule_row, self.run, self.steps)


@router.get("/runs/{run_id}")
def run_page(request: Request, run_id: str) -> Response:
    """One run: status (live while active), the step timeline, steps and output, JUnit counts,
    inputs, findings, transcript."""
    try:
        if not _is_uuid(run_id):  # a short id, copied from a table or the CLI
            full = _read(request, lambda session: _full_run_id(session, run_id))
            if full is not None:
                return _redirect(f"/ui/runs/{full}")
        _check_run_id(run_id)
        view = _read(request, lambda session: _RunView(session, run_id))
    except AdeError as exc:
        return _error_page(request, exc)
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
        inputs=shown_inputs, duration=duration, actions=list(QUEUE_ACTIONS),
        approvals=view.approvals, answers=ANSWERS,
        timeline=charts.timeline(spans, view.planned, now),
        steps=[_step_view(step, now) for step in view.steps],
        events=events, events_total=len(view.events),
        events_skipped=len(view.events) - len(events),
    )  # fmt: skip


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
                known = ", ".join(q.value for q in QueueStatus)
                raise InvalidInputError(f"queue status {value!r} is unknown; use one of {known}")

        def load(session: Any) -> list[tuple[str, list[RunLine]]]:
            found = []
            for value in wanted:
                rows, _ = runs_db.list_runs(
                    session, runs_db.RunFilter(queue_status=value), limit=PAGE_SIZE
                )
                found.append((value, _run_lines(session, rows)))
            return found

        sections = _read(request, load)
    except AdeError as exc:
        return _error_page(request, exc)
    back = "/ui/review" + (f"?{urlencode({'queue_status': queue_status})}" if queue_status else "")
    return render(
        request, "review.html", "Review queue",
        sections=sections, back=back, actions=list(QUEUE_ACTIONS),
        queue_statuses=[q.value for q in QueueStatus],
    )  # fmt: skip


# --- rules --------------------------------------------------------------------------------------


def _load(row: RuleRow) -> Rule | None:
    try:
        return rules_db.load_rule(row)
    except Exception:  # a stored document this version cannot read: show the row, not a 500
        log.exception("web page: could not load rule %s", row.id)
        return None


def has_manual_trigger(rule: Rule) -> bool:
    """May an operator start the rule by hand? Only with a `manual` trigger: a rule triggered
    by a webhook expects that event's variables (`trigger.number`, ...) and would fail."""
    return any(isinstance(trigger, ManualTrigger) for trigger in rule.triggers)


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


@dataclass(frozen=True)
class RuleLine:
    """A row of the rules table."""

    row: RuleRow
    rule: Rule | None
    manual: bool
    triggers: str
    upcoming: datetime | None
    problems: list[str]
    last: Any


def _rule_line(row: RuleRow, last: Sequence[Any]) -> RuleLine:
    rule = _load(row)
    fires = _next_fires(rule, 1) if rule else []
    return RuleLine(
        row=row,
        rule=rule,
        manual=rule is not None and has_manual_trigger(rule),
        triggers=_trigger_types(rule) if rule else "unreadable document",
        upcoming=min((times[0] for _, times, _ in fires if times), default=None),
        problems=[problem for _, _, problem in fires if problem],
        last=last[0] if last else None,
    )


@router.get("/rules")
def rules_page(request: Request) -> HTMLResponse:
    """Every rule: enabled, triggers, the next fire time, the last occurrence."""

    def load(session: Any) -> list[RuleLine]:
        return [
            _rule_line(row, occ_db.list_for_rule(session, row.id, 1))
            for row in rules_db.list_rules(session)
        ]

    return render(request, "rules.html", "Rules", rules=_read(request, load))


@router.get("/rules/{rule_id}")
def rule_page(request: Request, rule_id: str) -> HTMLResponse:
    """One rule: triggers, inputs, runs per day by outcome and p50/p95 durations over the last
    30 days, next fire times, recent occurrences with their runs' status, recent runs."""
    now = utcnow()
    first_day = (now - history.WINDOW + timedelta(days=1)).date()
    since = datetime.combine(first_day, datetime.min.time(), tzinfo=now.tzinfo)

    def load(session: Any) -> dict[str, Any]:
        row = rules_db.get_rule(session, rule_id)
        runs, _ = runs_db.list_runs(session, runs_db.RunFilter(rule_id=rule_id), limit=10)
        return {
            "row": row,
            "occurrences": history.occurrence_outcomes(session, rule_id, OCCURRENCES),
            "lines": _run_lines(session, runs),
            "days": history.daily_outcomes(session, rule_id, since),
            "stats": history.duration_stats(session, rule_id, since),
        }

    try:
        found = _read(request, load)
    except AdeError as exc:
        return _error_page(request, exc)
    row, stats = found["row"], found["stats"]
    rule = _load(row)
    inputs = ""
    if rule is not None and rule.inputs:
        inputs = ", ".join(f"{n} ({rule.inputs[n].type})" for n in sorted(rule.inputs))
    return render(
        request, "rule.html", f"Rule {row.id}",
        row=row, rule=rule, inputs=inputs,
        triggers=_trigger_types(rule) if rule else "",
        manual=rule is not None and has_manual_trigger(rule),
        window_days=history.WINDOW.days, stats=stats,
        outcomes=charts.outcomes_chart(found["days"], first_day, now.date()),
        durations=charts.durations_chart(stats.days, first_day, now.date()),
        fires=_next_fires(rule, NEXT_FIRES) if rule else [],
        occurrences=found["occurrences"], lines=found["lines"],
    )  # fmt: skip


@dataclass(frozen=True)
class InputField:
    """A typed input as its form field needs it (`value`: the default as the field shows it)."""

    type: str
    description: str
    required: bool
    default: Any
    options: list[str]
    value: str
    checked: bool


def _input_field(spec: InputSpec) -> InputField:
    default: str | bool | float = "" if spec.default is None else spec.default
    if isinstance(default, float) and default.is_integer():
        default = int(default)  # a YAML `1` arrives as 1.0
    return InputField(
        type=spec.type,
        description=spec.description,
        required=spec.required,
        default=spec.default,
        options=list(spec.options),
        value=str(default),
        checked=default is True or str(default).lower() == "true",
    )


def _no_manual_trigger(rule: Rule) -> InvalidInputError:
    return InvalidInputError(
        f"rule {rule.id!r} has no manual trigger, so it cannot be run by hand (its triggers: "
        f"{_trigger_types(rule)}); add `- type: manual` to its triggers to allow it"
    )


@router.get("/rules/{rule_id}/run")
def run_form(request: Request, rule_id: str) -> HTMLResponse:
    """The "Run now" form, one field per typed input of the rule."""
    try:
        row = _read(request, lambda session: rules_db.get_rule(session, rule_id))
        rule = _load(row)
        if rule is None:
            raise InvalidInputError(f"rule {rule_id!r} cannot be read; see the API's log")
        if not has_manual_trigger(rule):
            raise _no_manual_trigger(rule)
    except AdeError as exc:
        return _error_page(request, exc)
    if not can_act(request):
        message = "Starting a run needs an operator token."
        return render(
            request, "notice.html", f"Run {rule.id}", status_code=403, message=message, back=""
        )
    fields = [(name, _input_field(rule.inputs[name])) for name in sorted(rule.inputs)]
    key = uuid.uuid4().hex  # a double submit of this form starts one run, not two
    return render(request, "run_form.html", f"Run {rule.id}", rule=rule, fields=fields, key=key)


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
        rule = _read(request, lambda session: _load(rules_db.get_rule(session, rule_id)))
        if rule is not None and not has_manual_trigger(rule):
            raise _no_manual_trigger(rule)
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
