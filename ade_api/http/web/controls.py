"""The web page's controls of rules and scheduled runs: the scheduled-runs page and its cancel
button, pause and resume (the whole rule or one trigger, with a required note), enable and
disable.

Each POST calls the query function the API route calls (`ade_tasks.db.one_shots.cancel`,
`ade_tasks.db.pauses.pause` / `resume`, `ade_api.http.health_state.set_enabled`), so the checks and
the words of a refusal are the API's: an empty note is 422, a scheduled run a beat already
claimed or fired is 409, enabling a rule that cannot fire is 409 with its setup errors unless
"enable anyway" is ticked. Roles are the API's too: the auth middleware lets only operators
post to `/ui` (and records each post in the audit log, as for the API), and enabling or
disabling a rule needs an admin, as `POST /api/v1/rules/{id}/enable` does, checked here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response
from starlette.concurrency import run_in_threadpool

from ade_api.http.auth import actor
from ade_api.http.health_state import set_enabled
from ade_api.http.web.pages import (
    back_to,
    error_page,
    is_admin,
    posted_form,
    read,
    redirect,
    render,
    services_of,
)
from ade_api.http.web.rules import WAITING
from ade_tasks.db import one_shots as once_db
from ade_tasks.db import pauses as pauses_db
from ade_tasks.errors import AdeError, InvalidInputError, PolicyViolationError
from ade_tasks.states import OneShotStatus

router = APIRouter(prefix="/ui", include_in_schema=False)
PAGE_SIZE = 200


@router.get("/scheduled")
def scheduled_page(request: Request, status: str = "", rule: str = "") -> HTMLResponse:
    """Scheduled runs of every rule, soonest first: by default those still to fire (pending,
    or claimed by a beat that is firing them), else those of one status."""
    known = [s.value for s in OneShotStatus]
    try:
        if status and status not in known:
            raise InvalidInputError(f"status {status!r} is unknown; use one of {', '.join(known)}")
        statuses = [status] if status else list(WAITING)
        rows = read(
            request,
            lambda session: list(
                once_db.list_scheduled(
                    session, rule_id=rule or None, statuses=statuses, limit=PAGE_SIZE
                )
            ),
        )
    except AdeError as exc:
        return error_page(request, exc)
    back = "/ui/scheduled" + (f"?status={status}" if status else "")
    return render(
        request, "scheduled.html", "Scheduled runs",
        rows=rows, statuses=known, status=status, rule=rule, back=back, limit=PAGE_SIZE,
    )  # fmt: skip


@router.post("/scheduled/{scheduled_id}/cancel")
async def cancel_scheduled(request: Request, scheduled_id: str) -> Response:
    """Cancel a scheduled run before a beat fires it (409 once one claimed or fired it)."""
    form = await posted_form(request)

    def cancel() -> str:
        with services_of(request).session_factory.begin() as session:
            return once_db.cancel(session, scheduled_id, actor(request, None)).rule_id

    try:
        rule_id = await run_in_threadpool(cancel)
    except AdeError as exc:
        return error_page(request, exc)
    return redirect(back_to(form, f"/ui/rules/{rule_id}#scheduled"))


def posted_trigger(form: Mapping[str, str]) -> int | None:
    """The form's `trigger_index`: empty for the whole rule, else a trigger's number."""
    given = form.get("trigger_index", "").strip()
    if not given:
        return None
    if not given.isdigit():
        raise InvalidInputError(
            f"trigger_index {given!r} is not a trigger's number (0, 1, ...); leave it empty "
            "to pause or resume the whole rule"
        )
    return int(given)


@router.post("/rules/{rule_id}/pause")
async def pause_rule(request: Request, rule_id: str) -> Response:
    """Pause the rule's automatic triggers, or one of them, with a note (operator)."""
    form = await posted_form(request)

    def pause() -> None:
        index = posted_trigger(form)
        with services_of(request).session_factory.begin() as session:
            pauses_db.pause(session, rule_id, index, form.get("note", ""), actor(request, None))

    return await _then_rule_page(request, rule_id, pause, "#pauses")


@router.post("/rules/{rule_id}/resume")
async def resume_rule(request: Request, rule_id: str) -> Response:
    """Lift the rule's pause, or one trigger's (operator)."""
    form = await posted_form(request)

    def resume() -> None:
        index = posted_trigger(form)
        with services_of(request).session_factory.begin() as session:
            pauses_db.resume(session, rule_id, index)

    return await _then_rule_page(request, rule_id, resume, "#pauses")


@router.post("/rules/{rule_id}/enable")
async def enable_rule(request: Request, rule_id: str) -> Response:
    """Enable the rule (admin); one that cannot fire only with "enable anyway" ticked."""
    form = await posted_form(request)
    return await _then_rule_page(
        request, rule_id, lambda: _set(request, rule_id, True, form.get("force") == "true")
    )


@router.post("/rules/{rule_id}/disable")
async def disable_rule(request: Request, rule_id: str) -> Response:
    """Disable the rule (admin): its automatic triggers stop running it."""
    return await _then_rule_page(request, rule_id, lambda: _set(request, rule_id, False, True))


def _set(request: Request, rule_id: str, enabled: bool, force: bool) -> None:
    if not is_admin(request):
        what = "enabling" if enabled else "disabling"
        raise PolicyViolationError(
            f"{what} rule {rule_id!r} needs an admin token, as "
            f"POST /api/v1/rules/{rule_id}/{'enable' if enabled else 'disable'} does; "
            "ask an admin"
        )
    services = services_of(request)
    with services.session_factory.begin() as session:
        set_enabled(session, services.settings, rule_id, enabled, force=force)


async def _then_rule_page(
    request: Request, rule_id: str, work: Callable[[], None], anchor: str = ""
) -> Response:
    """Do `work()` off the event loop, then show the rule's page (or the error's page)."""
    try:
        await run_in_threadpool(work)
    except AdeError as exc:
        return error_page(request, exc)
    return redirect(f"/ui/rules/{rule_id}{anchor}")
