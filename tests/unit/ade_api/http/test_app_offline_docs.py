"""The OpenAPI pages (/docs, /redoc) load every script and style from the API itself, so they
work without internet: the full app in process, on SQLite and the in-memory sender."""

from __future__ import annotations

import re
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest
from fastapi.testclient import TestClient

from ade_api.http.app import OPENAPI_ASSETS, create_app
from ade_tasks.access.roles import Role
from ade_tasks.db import tokens as tokens_db
from ade_tasks.db.engine import SessionFactory
from ade_tasks.settings import Settings
from ade_tasks.testing import InMemorySender
from ade_workers.celery.app import create_celery_app

ASSET_ATTR = re.compile(r"""\b(?:src|href)\s*=\s*["']([^"']+)["']""")
ABSOLUTE_URL = re.compile(r"""\b(?:https?:)?//[A-Za-z0-9.-]+[^\s"'<>)]*""")
CONTENT_TYPES = {".js": "javascript", ".css": "text/css", ".png": "image/png"}


@pytest.fixture
def client(session_factory: SessionFactory) -> Iterator[TestClient]:
    settings = Settings()
    celery = create_celery_app(settings, session_factory=session_factory)
    app = create_app(
        settings, session_factory=session_factory, celery=celery, sender=InMemorySender()
    )
    with TestClient(app) as test_client:  # no token: the pages and their assets are open
        yield test_client


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_openapi_page_references_only_its_own_assets(client: TestClient, page: str) -> None:
    # Given the API, when a browser without a token opens the page
    response = client.get(page)

    # Then it is HTML that names no other host: no CDN, no web fonts
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    html = response.text
    assert ABSOLUTE_URL.findall(html) == []
    assets = ASSET_ATTR.findall(html)
    scripts = [a for a in assets if a.endswith(".js")]
    assert scripts, f"{page} loads no script: {assets}"
    assert "/openapi.json" in html
    for url in assets:
        assert not urlsplit(url).netloc, url
        assert url.startswith(OPENAPI_ASSETS + "/"), url


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_openapi_page_assets_are_served_by_the_api(client: TestClient, page: str) -> None:
    # Given the assets the page names
    assets = ASSET_ATTR.findall(client.get(page).text)

    # When each is fetched without a token, then it is there, with its type and real content
    for url in assets:
        response = client.get(url)
        assert response.status_code == 200, url
        suffix = url[url.rindex(".") :]
        assert CONTENT_TYPES[suffix] in response.headers["content-type"], url
        assert len(response.content) > 1000, url
    # And the document the page renders is there too
    assert client.get("/openapi.json").json()["info"]["title"] == "ADE Tasks"


def test_swagger_ui_bundle_is_the_real_script(client: TestClient) -> None:
    # When the Swagger UI bundle and ReDoc are fetched, then they define what the pages call
    assert "SwaggerUIBundle" in client.get(f"{OPENAPI_ASSETS}/swagger-ui-bundle.js").text
    assert "Redoc" in client.get(f"{OPENAPI_ASSETS}/redoc.standalone.js").text


def test_a_method_a_path_does_not_take_is_answered_405_with_allow(
    client: TestClient, session_factory: SessionFactory
) -> None:
    """Issue 37, finding 11: every 405 says which methods the path takes (RFC 9110), on every
    API path the OpenAPI schema lists, as problem+json."""
    with session_factory.begin() as session:  # past the token check: the method is wrong
        _, secret = tokens_db.create_token(session, "ops", Role.ADMIN, "test")
    client.headers["Authorization"] = f"Bearer {secret}"
    paths = client.get("/openapi.json").json()["paths"]
    checked = 0
    served = [  # a concrete path may be served by several templates (/rules/trust, /rules/{id})
        (re.compile("^" + re.sub(r"\{[^}]+\}", "[^/]+", template) + "$"), operations)
        for template, operations in paths.items()
    ]
    for template in paths:
        path = re.sub(r"\{[^}]+\}", "1", template)
        taken = {m.upper() for pattern, ops in served if pattern.match(path) for m in ops}
        method = next(m for m in ("DELETE", "PATCH", "PUT", "POST", "GET") if m not in taken)
        answer = client.request(method, path)
        assert answer.status_code == 405, (method, path, answer.status_code)
        assert set(answer.headers["allow"].replace(" ", "").split(",")) >= taken, path
        assert answer.headers["content-type"].startswith("application/problem+json")
        checked += 1
    assert checked > 20
