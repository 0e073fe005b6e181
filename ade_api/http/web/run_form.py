"""The "Run now" form of a rule with a manual trigger: one field per typed input, and when to
run it: now, at a time (`run_at`, with Z or an offset) or after a delay (`delay_seconds`: `600`,
`90s`, `10m`, `2h`, `1d`).

The fields come in the order the rule declares its inputs; required ones are marked (and the
browser refuses the form while one is empty), and a required choice without a default
preselects nothing, so nobody starts a run with an option they never chose.

The form is read into the API's own `ManualRunRequest`, so a time without a zone, a time in the
past, or both a time and a delay are refused with the API's words and the field named; a run now
goes through `dispatch_retrying` and a scheduled one through
`ade_tasks.schedule.one_shots.schedule_manual_run`, as `POST /api/v1/rules/{id}/runs` does. While
the kill switch (ADE_DISABLE_AUTOMATIONS) is on, an admin's form offers "force" (a run now only: the
API's `force` does not apply to a scheduled run, which meets the kill switch when it fires);
`ade_api.http.auth.forcing_admin` refuses it from anyone else. The form's hidden key makes a double
submit start (or schedule) one run, not two.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from ade_api.http.auth import actor, forcing_admin
from ade_api.http.schemas.manual_runs import ManualRunRequest
from ade_api.http.web.pages import (
    automations_disabled,
    can_act,
    error_page,
    is_admin,
    posted_form,
    read,
    redirect,
    render,
    services_of,
)
from ade_api.http.web.rule_rows import has_manual_trigger, no_manual_trigger, stored_rule
from ade_tasks.clock import utcnow
from ade_tasks.cron.slots import parse_delay
from ade_tasks.db import rules as rules_db
from ade_tasks.errors import AdeError, InvalidInputError
from ade_tasks.json_document import JsonObject
from ade_tasks.rules.outputs import InputSpec
from ade_tasks.rules.rule import Rule
from ade_tasks.runs.trigger_events import TriggerEvent
from ade_tasks.schedule.one_shots import schedule_manual_run

router = APIRouter(prefix="/ui", include_in_schema=False)


@dataclass(frozen=True)
class InputField:
    """A typed input as its form field needs it (`value`: the default as the field shows it)."""

    type: str
    description: str
    required: bool
    default: str | bool | float | None
    options: list[str]
    value: str
    checked: bool


def form_fields(rule: Rule) -> list[tuple[str, InputField]]:
    """The form's fields, one per typed input, in the order the rule declares them."""
    return [(name, _input_field(spec)) for name, spec in rule.inputs.items()]


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


@router.get("/rules/{rule_id}/run")
def run_form(request: Request, rule_id: str) -> HTMLResponse:
    """The "Run now" form, one field per typed input of the rule, and when to run it."""
    try:
        row = read(request, lambda session: rules_db.get_rule(session, rule_id))
        rule = stored_rule(row)
        if rule is None:
            raise InvalidInputError(f"rule {rule_id!r} cannot be read; see the API's log")
        if not has_manual_trigger(rule):
            raise no_manual_trigger(rule)
    except AdeError as exc:
        return error_page(request, exc)
    if not can_act(request):
        message = "Starting a run needs an operator token."
        return render(
            request, "notice.html", f"Run {rule.id}", status_code=403, message=message, back=""
        )
    fields = form_fields(rule)
    key = uuid.uuid4().hex  # a double submit of this form starts one run, not two
    return render(
        request, "run_form.html", f"Run {rule.id}", rule=rule, fields=fields, key=key,
        offer_force=automations_disabled(request) and is_admin(request),
        example=utcnow().replace(microsecond=0).isoformat().replace("+00:00", "Z"),
    )  # fmt: skip


def posted_inputs(form: Mapping[str, str]) -> JsonObject:
    """The form's inputs: `in.<name>` fields (empty ones left to the rule's defaults) and the
    free-form `extra` lines of a rule that declares none."""
    inputs: JsonObject = {
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


def posted_request(form: Mapping[str, str]) -> ManualRunRequest:
    """The form as the API's manual-run request: its inputs, `run_at`, `delay_seconds` (whole
    seconds or a duration such as `10m`) and `force`; InvalidInputError naming the field."""
    body: JsonObject = {"inputs": posted_inputs(form), "force": form.get("force") == "true"}
    run_at, delay = form.get("run_at", "").strip(), form.get("delay_seconds", "").strip()
    if run_at:
        body["run_at"] = run_at
    if delay:
        seconds = parse_delay(delay, "delay_seconds").total_seconds()
        if seconds != int(seconds):
            raise InvalidInputError(f"delay_seconds {delay!r}: give whole seconds")
        body["delay_seconds"] = int(seconds)
    try:
        return ManualRunRequest.model_validate(body)
    except ValidationError as exc:
        raise InvalidInputError(_problems(exc)) from None


def _problems(exc: ValidationError) -> str:
    """A validation error in words, each problem with its field."""
    found = []
    for error in exc.errors():
        field = ".".join(str(part) for part in error["loc"]) or "form"
        found.append(f"{field}: {error['msg'].removeprefix('Value error, ')}")
    return "; ".join(found)


@router.post("/rules/{rule_id}/runs")
async def start_run(request: Request, rule_id: str) -> Response:
    """Start a manual run like `POST /api/v1/rules/{id}/runs`, then show it; or, with a time
    or a delay, schedule it and show it on the rule's page."""
    form = await posted_form(request)
    services = services_of(request)
    try:
        body = posted_request(form)
        rule = read(request, lambda session: stored_rule(rules_db.get_rule(session, rule_id)))
        if rule is not None and not has_manual_trigger(rule):
            raise no_manual_trigger(rule)
        key = form.get("key") or None
        run_at = body.scheduled_for(utcnow())
        if run_at is not None:

            def schedule() -> str:
                with services.session_factory.begin() as session:
                    row, _ = schedule_manual_run(
                        session, rule_id, run_at, inputs=body.inputs,
                        requested_by=actor(request, None), key=f"ui:{key[:64]}" if key else None,
                    )  # fmt: skip
                    return row.id

            scheduled = await run_in_threadpool(schedule)
            return redirect(f"/ui/rules/{rule_id}?scheduled={scheduled}#scheduled")
        own = f"ui:{key[:64]}" if key else f"request:{uuid.uuid4().hex}"
        forced_by = forcing_admin(request, body.force, None)
        trigger = TriggerEvent.manual(
            body.inputs, key=own, by=actor(request, None), forced_by=forced_by
        )
        result = await run_in_threadpool(services.dispatch, rule_id, trigger, own_key=not key)
    except AdeError as exc:
        return error_page(request, exc)
    return redirect(f"/ui/runs/{result.run.id}")
