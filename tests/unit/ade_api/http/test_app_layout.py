"""The API's layout keeps its wire contract: the rule endpoints, split over one router module
each, are served in the order /docs always listed them, and the resource schema modules never
define two models of one name (FastAPI names OpenAPI components by class name)."""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

from pydantic import BaseModel

import ade_api.http.schemas
from ade_api.http.app import create_app
from ade_api.http.schemas.problem import Problem, problem_responses
from ade_tasks.db.engine import SessionFactory
from ade_tasks.settings import Settings
from ade_tasks.testing import InMemorySender
from ade_workers.celery.app import create_celery_app

RULE_ENDPOINTS = [
    ("/api/v1/rules", ["get", "post"]),
    ("/api/v1/rules/trust", ["post"]),
    ("/api/v1/rules/{rule_id}", ["get", "put", "delete"]),
    ("/api/v1/rules/push", ["post"]),
    ("/api/v1/rules/{rule_id}/enable", ["post"]),
    ("/api/v1/rules/{rule_id}/disable", ["post"]),
    ("/api/v1/rules/{rule_id}/versions", ["get"]),
    ("/api/v1/rules/{rule_id}/schedule", ["get"]),
    ("/api/v1/rules/{rule_id}/occurrences", ["get"]),
    ("/api/v1/rules/{rule_id}/runs", ["post"]),
    ("/api/v1/rules/{rule_id}/pause", ["post"]),
    ("/api/v1/rules/{rule_id}/resume", ["post"]),
    ("/api/v1/rules/{rule_id}/pauses", ["get"]),
    ("/api/v1/rules/{rule_id}/backfill", ["post"]),
]


def test_every_rule_endpoint_is_served_in_the_order_docs_lists_it(
    session_factory: SessionFactory,
) -> None:
    # Given the app with its rule routers (documents, enabling, versions, schedule, runs, ...)
    settings = Settings()
    app = create_app(
        settings,
        session_factory=session_factory,
        celery=create_celery_app(settings, session_factory=session_factory),
        sender=InMemorySender(),
    )

    # When its OpenAPI document is built
    paths = app.openapi()["paths"]

    # Then every rule endpoint is in it, in the order it always had
    rule_paths = [(path, list(item)) for path, item in paths.items() if "/rules" in path]
    assert rule_paths == RULE_ENDPOINTS


def test_no_two_resource_schema_modules_define_a_model_of_one_name() -> None:
    # Given every model the resource modules of ade_api.http.schemas define
    defined: dict[str, list[str]] = {}
    for found in pkgutil.iter_modules(ade_api.http.schemas.__path__, "ade_api.http.schemas."):
        module = importlib.import_module(found.name)
        for name, value in vars(module).items():
            if (
                isinstance(value, type)
                and issubclass(value, BaseModel)
                and value.__module__ == module.__name__
            ):
                defined.setdefault(name, []).append(module.__name__)

    # Then each name is defined once, so OpenAPI keeps its short component names
    assert defined and {name: at for name, at in defined.items() if len(at) > 1} == {}


def test_the_schemas_package_re_exports_nothing() -> None:
    # Given the package's __init__
    tree = ast.parse(Path(ade_api.http.schemas.__file__ or "").read_text())

    # Then it is its docstring alone: callers import from the resource modules
    assert len(tree.body) == 1 and ast.get_docstring(tree)


def test_a_routes_errors_are_documented_as_problems_with_their_meaning() -> None:
    # When a route's errors are documented by status and meaning
    responses = problem_responses({404: "no such run", 409: "the run already finished"})

    # Then each status answers with a Problem body, described, in the order given
    assert responses == {
        404: {"model": Problem, "description": "no such run"},
        409: {"model": Problem, "description": "the run already finished"},
    }
    assert list(responses) == [404, 409]
