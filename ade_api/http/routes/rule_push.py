"""Rules from git with a token: a rules directory pushed as one versioned change
(`ade_tasks.rule_files.push` says what a push does)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from ade_api.http.auth import actor
from ade_api.http.deps import ServicesDep
from ade_api.http.schemas.problem import problem_responses
from ade_api.http.schemas.rule_push import PushOut, PushProblemOut, PushProblems, RulesPush
from ade_tasks.errors import RuleProblem
from ade_tasks.rule_files.push import PushedFile, load_pushed, push_rules

router = APIRouter(prefix="/api/v1/rules", tags=["rules"])
PROBLEM = "application/problem+json"


@router.post(
    "/push",
    responses={
        **problem_responses(
            {409: "the file rules changed since `base`: run the push again", 413: "too large"}
        ),
        422: {
            "model": PushProblems,
            "description": "a file has problems; nothing was applied; `errors` lists every one",
            "content": {PROBLEM: {}},
        },
    },
)
def push_rules_directory(body: RulesPush, request: Request, services: ServicesDep) -> PushOut:
    """Make the rules from files match a pushed directory, as `ade-tasks rules sync` of it
    would, in one transaction (admin): every file validated as a sync validates it, and one
    problem anywhere refuses the whole push (422, every problem listed). File rules the
    directory does not hold are removed. `dry_run` answers the same comparison (with a unified
    diff per changed rule) and changes nothing; pass its `base` to the real push so that a
    change applied in between refuses it (409) instead of being undone."""
    files = [PushedFile(item.path, item.text) for item in body.files]
    loaded = load_pushed(files, body.directory.rstrip("/"))
    if loaded.problems:
        return _refused(loaded.problems)  # type: ignore[return-value]
    with services.session_factory.begin() as session:
        plan = push_rules(
            session, loaded.rules, base=body.base, dry_run=body.dry_run, by=actor(request, body.by)
        )
    return PushOut.model_validate(plan, from_attributes=True)


def _refused(problems: list[RuleProblem]) -> JSONResponse:
    """The 422 of a push with problems: every one, with its file."""
    shown = "; ".join(map(str, problems[:20])) + ("; ..." if len(problems) > 20 else "")
    body = PushProblems(
        title="Invalid Rules",
        status=422,
        detail=f"{len(problems)} problem(s) in the pushed rules, nothing was applied: {shown}",
        errors=[PushProblemOut(file=p.file, field=p.field, reason=p.reason) for p in problems],
    )
    return JSONResponse(body.model_dump(), status_code=422, media_type=PROBLEM)
