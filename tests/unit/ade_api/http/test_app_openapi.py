"""The OpenAPI schema states what the server enforces (issue 37, finding 11): every constraint
a parameter declares (enum, minimum, maximum, pattern, maxLength, date-time, integer) is walked
from /openapi.json, and a value outside it is refused with 422 naming that parameter, while a
value inside it is never refused for it. The full app in process, on SQLite."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from ade_api.http.app import create_app
from ade_api.http.routes.runs import RUN_ID_PREFIX
from ade_api.http.schemas.params import (
    BASE64_CURSOR,
    EVENT_SOURCE,
    TRIGGER_TYPE_NAMES,
    VERSION_CURSOR,
)
from ade_tasks.access.roles import Role
from ade_tasks.db import tokens as tokens_db
from ade_tasks.db.engine import SessionFactory
from ade_tasks.rules.triggers import KNOWN_TRIGGER_TYPES, canonical_trigger_type
from ade_tasks.settings import Settings
from ade_tasks.testing import InMemorySender
from ade_workers.celery.app import create_celery_app

#: A value matching each declared pattern (a new pattern needs its sample here).
INSIDE_PATTERN = {
    BASE64_CURSOR: "MjAyNi0xMi0wN1QwOTowMDowMCswMDowMHwx",
    VERSION_CURSOR: "7",
    RUN_ID_PREFIX: "0a1b",
    EVENT_SOURCE: "webhook:deploys",
}
#: Path parameters without constraints, filled so the request reaches the route.
PLACEHOLDERS = {"rule_id": "no-such-rule", "run_id": str(uuid.uuid4()), "hook_id": "no-such-hook"}
#: The JSON Schema keywords the walk checks.
CONSTRAINTS = {"enum", "minimum", "maximum", "pattern", "maxLength", "format"}
#: Inside a range, a value no row has (never token 1, the one this test calls with).
FAR = 2**40


@pytest.fixture
def client(session_factory: SessionFactory) -> Iterator[TestClient]:
    settings = Settings()
    celery = create_celery_app(settings, session_factory=session_factory)
    app = create_app(
        settings, session_factory=session_factory, celery=celery, sender=InMemorySender()
    )
    with session_factory.begin() as session:
        _, secret = tokens_db.create_token(session, "walker", Role.ADMIN, "tests")
    with TestClient(app, headers={"Authorization": f"Bearer {secret}"}) as test_client:
        yield test_client


def _schema(parameter: dict[str, Any], components: dict[str, Any]) -> dict[str, Any]:
    """The parameter's schema without the `null` branch, its $ref resolved."""
    schema = parameter["schema"]
    branches = [b for b in schema.get("anyOf", [schema]) if b.get("type") != "null"]
    found = dict(branches[0])
    if "$ref" in found:
        found = components[found["$ref"].rsplit("/", 1)[1]]
    if found.get("type") == "array" and "$ref" in found["items"]:
        found = {**found, "items": components[found["items"]["$ref"].rsplit("/", 1)[1]]}
    # A constraint may sit beside the anyOf (a string-or-null whose string has a pattern).
    return {**found, **{k: v for k, v in schema.items() if k in CONSTRAINTS}}


def _cases(schema: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """(constraint, a value outside it, a value inside it) for each constraint declared."""
    cases: list[tuple[str, Any, Any]] = []
    if "enum" in schema:
        cases.append(("enum", "not-a-member", schema["enum"][0]))
    if schema.get("type") == "array" and "enum" in schema["items"]:
        cases.append(("enum", ["not-a-member"], [schema["items"]["enum"][0]]))
    if schema.get("type") == "integer":
        low, high = schema.get("minimum", -(2**63)), schema.get("maximum", 2**63 - 1)
        inside = min(max(FAR, low), high)
        cases.append(("integer", "ten", inside))
        if "minimum" in schema:
            cases.append(("minimum", low - 1, inside))
        if "maximum" in schema:
            cases.append(("maximum", high + 1, inside))
    if "pattern" in schema:
        assert schema["pattern"] in INSIDE_PATTERN, f"add a sample for {schema['pattern']}"
        cases.append(("pattern", "!!", INSIDE_PATTERN[schema["pattern"]]))
    if "maxLength" in schema:
        cases.append(("maxLength", "x" * (schema["maxLength"] + 1), "x"))
    if schema.get("format") == "date-time":
        cases.append(("date-time", "0.5", "2026-12-07T09:00:00Z"))
    if schema.get("format") == "date":
        cases.append(("date", "0.5", "2026-12-07"))
    return cases


def _walk(client: TestClient) -> Iterator[tuple[str, str, dict[str, Any], str, Any, Any]]:
    document = client.get("/openapi.json").json()
    components = document["components"]["schemas"]
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            for parameter in operation.get("parameters", []):
                for constraint, outside, inside in _cases(_schema(parameter, components)):
                    yield method, path, parameter, constraint, outside, inside


def _call(
    client: TestClient,
    method: str,
    path: str,
    parameters: list[dict[str, Any]],
    parameter: dict[str, Any],
    value: Any,
) -> Any:
    filled = {p["name"]: PLACEHOLDERS.get(p["name"], FAR) for p in parameters if p["in"] == "path"}
    where, name = parameter["in"], parameter["name"]
    if where == "path":
        filled[name] = value
    url = path.format(**filled)
    query = {name: value} if where == "query" else None
    headers = {name: str(value)} if where == "header" else None
    return client.request(method.upper(), url, params=query, headers=headers)


def test_every_declared_constraint_is_what_the_server_enforces(client: TestClient) -> None:
    document = client.get("/openapi.json").json()
    walked = list(_walk(client))
    assert len(walked) > 40  # the walk reaches the API's parameters, not an empty schema
    kinds = {"enum", "integer", "minimum", "maximum", "pattern", "maxLength", "date-time", "date"}
    assert {constraint for _, _, _, constraint, _, _ in walked} == kinds
    assert sum(p["name"] == "cursor" for _, _, p, c, _, _ in walked if c == "pattern") == 4

    wrong = []
    for method, path, parameter, constraint, outside, inside in walked:
        parameters = document["paths"][path][method]["parameters"]
        where = f"{parameter['in']}.{parameter['name']}"
        refused = _call(client, method, path, parameters, parameter, outside)
        # Named as pydantic names it (query.until) or as the route's own check does.
        if refused.status_code != 422 or parameter["name"] not in refused.json()["detail"]:
            wrong.append(f"{method} {path} {where}={outside!r} ({constraint}): {refused.text}")
        accepted = _call(client, method, path, parameters, parameter, inside)
        if accepted.status_code >= 500 or (
            accepted.status_code == 422 and f"{where}:" in accepted.json()["detail"]
        ):
            wrong.append(f"{method} {path} {where}={inside!r} refused: {accepted.text}")
    assert wrong == []


def test_every_date_time_field_of_a_body_refuses_a_number(client: TestClient) -> None:
    document = client.get("/openapi.json").json()
    components = document["components"]["schemas"]
    checked, wrong = 0, []
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            content = operation.get("requestBody", {}).get("content", {})
            ref = content.get("application/json", {}).get("schema", {}).get("$ref")
            if ref is None:
                continue
            fields = components[ref.rsplit("/", 1)[1]].get("properties", {})
            for name, field in fields.items():
                if "date-time" not in {b.get("format") for b in field.get("anyOf", [field])}:
                    continue
                filled = {
                    p["name"]: PLACEHOLDERS.get(p["name"], FAR)
                    for p in operation.get("parameters", [])
                    if p["in"] == "path"
                }
                answer = client.request(method.upper(), path.format(**filled), json={name: 0.5})
                checked += 1
                if answer.status_code != 422 or f"body.{name}:" not in answer.json()["detail"]:
                    wrong.append(f"{method} {path} {name}=0.5: {answer.text}")
    assert checked >= 2 and wrong == []


def test_until_0_5_is_refused_as_not_a_date_time(client: TestClient) -> None:
    answer = client.get("/api/v1/runs", params={"until": "0.5"})

    assert answer.status_code == 422
    assert answer.headers["content-type"] == "application/problem+json"
    detail = answer.json()["detail"]
    assert "query.until" in detail and "'0.5' is not a date-time" in detail
    assert "ISO 8601 with a time zone, e.g. 2026-12-07T09:00:00Z" in detail
    naive = client.get("/api/v1/runs", params={"until": "2026-12-07T09:00:00"})
    assert naive.status_code == 422 and "has no time zone" in naive.json()["detail"]


def test_every_trigger_type_the_schema_offers_is_one_the_server_takes() -> None:
    assert {canonical_trigger_type(name) for name in TRIGGER_TYPE_NAMES} == KNOWN_TRIGGER_TYPES
