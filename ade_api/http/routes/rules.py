"""Rules as documents: list, create, read, replace and delete them, and the trust of a shared
rules file. The rest of a rule's endpoints live beside it: enabling (`rule_enabling`), its
version history (`rule_versions`), its schedule (`rule_schedule`) and manual runs
(`rule_runs`); the app includes them in that order, so /docs lists them as before."""

from __future__ import annotations

import logging
from typing import Annotated

from fastapi import APIRouter, Query, Request, Response, status
from fastapi.responses import JSONResponse

from ade_api.http.auth import actor
from ade_api.http.deps import ServicesDep, SessionDep
from ade_api.http.health_state import live_state, rule_out
from ade_api.http.schemas.params import Base64Cursor
from ade_api.http.schemas.problem import Problem, Responses, problem_responses
from ade_api.http.schemas.rules import (
    FieldProblem,
    RuleDeleted,
    RuleOut,
    RuleProblems,
    RuleWrite,
    TrustGranted,
    TrustRequest,
)
from ade_tasks.db import rule_edits as rule_edits_db
from ade_tasks.db import rule_trust as rule_trust_db
from ade_tasks.db import rules as rules_db
from ade_tasks.errors import RuleProblem
from ade_tasks.rules.loader import parse_rule, parse_yaml
from ade_tasks.rules.rule import Rule

log = logging.getLogger(__name__)
router = APIRouter(prefix="/api/v1/rules", tags=["rules"])
NOT_FOUND = problem_responses({404: "no such rule"})


CONFLICT = problem_responses({409: "the rule comes from a rules file, or is in use"})
PROBLEM = "application/problem+json"


INVALID: Responses = {
    422: {
        "model": RuleProblems,
        "description": "invalid rule document; `errors` names each wrong field",
        "content": {PROBLEM: {}},
    }
}
NEXT_CURSOR = "X-Next-Cursor"


def _invalid(problems: list[RuleProblem]) -> JSONResponse:
    detail = "invalid rule: " + "; ".join(f"{p.field}: {p.reason}" for p in problems)
    body = RuleProblems(
        title="Invalid Rule",
        status=422,
        detail=detail,
        errors=[FieldProblem(field=p.field, reason=p.reason) for p in problems],
    )
    return JSONResponse(body.model_dump(), status_code=422, media_type=PROBLEM)


def _parse(body: RuleWrite, rule_id: str | None = None) -> tuple[Rule, bool] | JSONResponse:
    """The validated rule of a write (and whether its document says `enabled`), or the 422."""
    source = "rule"
    document: object = body.document
    if body.yaml is not None:
        document = parse_yaml(body.yaml, source)
        if isinstance(document, RuleProblem):
            return _invalid([document])
    if rule_id is not None and isinstance(document, dict):
        document.setdefault("id", rule_id)
        if document["id"] != rule_id:
            return _invalid(
                [
                    RuleProblem(
                        source,
                        "id",
                        f"{document['id']!r} is not the rule being updated ({rule_id!r}); "
                        "to rename a rule, create the new one and delete the old",
                    )
                ]
            )
    parsed = parse_rule(document, source)
    if not isinstance(parsed, Rule):
        return _invalid(parsed)
    return parsed, isinstance(document, dict) and "enabled" in document


# --- routes ---------------------------------------------------------------------------------


@router.get(
    "",
    responses={
        200: {
            "headers": {
                NEXT_CURSOR: {
                    "description": "with `limit`: the `cursor` of the next page (absent on the "
                    "last page)",
                    "schema": {"type": "string"},
                },
                "Link": {
                    "description": 'the next page as `rel="next"`',
                    "schema": {"type": "string"},
                },
            }
        }
    },
)
def list_rules(
    request: Request,
    response: Response,
    session: SessionDep,
    services: ServicesDep,
    limit: Annotated[int | None, Query(ge=1, le=1000)] = None,
    cursor: Base64Cursor = None,
) -> list[RuleOut]:
    """Rules, by id. Without `limit`, every rule; with it, a page of at most `limit` rules after
    `cursor`, and the next page's cursor in the `X-Next-Cursor` header (and a `Link` header).
    Each with its `health`: whether it can fire, per trigger."""
    state = live_state(session, services.settings)
    if limit is None and cursor is None:
        return [rule_out(row, state) for row in rules_db.list_rules(session)]
    rows, next_cursor = rules_db.list_rules_page(session, limit=limit or 100, cursor=cursor)
    if next_cursor is not None:
        response.headers[NEXT_CURSOR] = next_cursor
        next_url = request.url.include_query_params(cursor=next_cursor, limit=limit or 100)
        response.headers["Link"] = f'<{next_url}>; rel="next"'
    return [rule_out(row, state) for row in rows]


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    responses={**INVALID, 409: {"model": Problem, "description": "the id is taken"}},
)
def create_rule(
    body: RuleWrite, request: Request, response: Response, services: ServicesDep
) -> RuleOut:
    """Create a rule (source `api`) from its JSON document or YAML text. It is trusted (only an
    admin may create one) but may not call admin-only `ade-action`s: those need a rule from the
    cluster's rules directory."""
    parsed = _parse(body)
    if isinstance(parsed, JSONResponse):
        return parsed  # type: ignore[return-value]
    rule, _ = parsed
    with services.session_factory.begin() as session:
        row = rule_edits_db.create_rule(session, rule, actor(request, body.by))
        out = rule_out(row, live_state(session, services.settings))
    response.headers["Location"] = str(request.url_for("get_rule", rule_id=rule.id))
    return out


@router.post("/trust", responses=NOT_FOUND)
def trust_shared_file(body: TrustRequest, request: Request, services: ServicesDep) -> TrustGranted:
    """Trust a reviewed shared rules file; its rules may run until the file changes again."""
    with services.session_factory.begin() as session:
        released = rule_trust_db.trust_hash(session, body.content_hash, actor(request, body.by))
    return TrustGranted(content_hash=body.content_hash, rules=released)


@router.get("/{rule_id}", responses=NOT_FOUND)
def get_rule(rule_id: str, session: SessionDep, services: ServicesDep) -> RuleOut:
    """One rule with its validated document and its `health`."""
    row = rules_db.get_rule(session, rule_id)
    return rule_out(row, live_state(session, services.settings))


@router.put("/{rule_id}", responses={**NOT_FOUND, **INVALID, **CONFLICT})
def update_rule(rule_id: str, body: RuleWrite, request: Request, services: ServicesDep) -> RuleOut:
    """Replace a rule's document (the `id` may be left out); a changed document is a new version
    in its history, an identical one changes nothing. A document without `enabled` keeps the
    rule enabled or disabled as it is. Rules from files are refused with 409: edit the file and
    run `ade-tasks rules sync`."""
    parsed = _parse(body, rule_id)
    if isinstance(parsed, JSONResponse):
        return parsed  # type: ignore[return-value]
    rule, says_enabled = parsed
    with services.session_factory.begin() as session:
        row, _ = rule_edits_db.update_rule(
            session, rule_id, rule, actor(request, body.by), keep_enabled=not says_enabled
        )
        return rule_out(row, live_state(session, services.settings))


@router.delete("/{rule_id}", responses={**NOT_FOUND, **CONFLICT})
def delete_rule(
    rule_id: str,
    request: Request,
    services: ServicesDep,
    by: Annotated[str, Query(max_length=200)] = "",
) -> RuleDeleted:
    """Delete a rule created through the API. Its runs, schedule occurrences and version history
    stay (the history ends with a `deleted` entry; re-creating the id continues its versions).
    Refused with 409 while a run of it is queued, running or waiting, and for rules from files
    (remove the file and run `ade-tasks rules sync`)."""
    with services.session_factory.begin() as session:
        version = rule_edits_db.delete_rule(session, rule_id, actor(request, by))
    return RuleDeleted(
        rule_id=rule_id,
        version=version,
        message=f"rule {rule_id!r} deleted; its runs and version history are kept",
    )
