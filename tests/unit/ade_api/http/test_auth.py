"""The role each request needs, and tokens stored as digests only."""

from __future__ import annotations

import pytest

from ade_api.http.auth import _credentials, required_role
from ade_tasks.access.roles import Role
from ade_tasks.db import tokens as tokens_db
from ade_tasks.db.engine import SessionFactory
from ade_tasks.db.schema import ApiTokenRow
from ade_tasks.errors import ConflictError

V, OP, A = Role.VIEWER, Role.OPERATOR, Role.ADMIN


@pytest.mark.parametrize(
    ("method", "path", "needed"),
    [
        ("GET", "/healthz", None),
        ("GET", "/readyz", None),
        ("GET", "/openapi.json", None),
        ("POST", "/api/v1/webhooks/github", None),  # its signature authenticates it
        ("POST", "/api/v1/webhooks/deploys", None),
        ("GET", "/api/v1/webhooks/deploys/deliveries", V),  # the delivery log is a read
        ("POST", "/api/v1/webhooks/deploys/token", OP),  # nothing but a delivery is open
        ("GET", "/api/v1/runs", V),
        ("GET", "/api/v1/rules/hello", V),
        ("POST", "/api/v1/rules/hello/runs", OP),
        ("POST", "/api/v1/rules/hello/backfill", OP),
        ("POST", "/api/v1/runs/abc/cancel", OP),
        ("POST", "/api/v1/inputs/3/answer", OP),
        ("POST", "/api/v1/ingress/events", OP),
        ("POST", "/api/v1/rules/trust", A),
        ("PUT", "/api/v1/rules/hello", A),
        ("DELETE", "/api/v1/rules/hello", A),
        ("GET", "/api/v1/tokens", A),
        ("POST", "/api/v1/tokens", A),
        ("GET", "/api/v1/audit", A),
        ("GET", "/ui/login", None),
        ("GET", "/ui/runs", V),
        ("POST", "/ui/runs/abc/cancel", OP),
    ],
)
def test_each_request_needs_the_least_role_that_may_make_it(
    method: str, path: str, needed: Role | None
) -> None:
    assert required_role(method, path, metrics_public=False) == needed


def test_metrics_are_open_only_when_configured() -> None:
    assert required_role("GET", "/metrics", metrics_public=False) == Role.VIEWER
    assert required_role("GET", "/metrics", metrics_public=True) is None


def test_roles_rank_viewer_below_operator_below_admin() -> None:
    assert V.rank < OP.rank < A.rank


def test_only_the_digest_of_a_token_is_stored_and_revoked_tokens_stop_working(
    session_factory: SessionFactory,
) -> None:
    with session_factory.begin() as session:
        row, secret = tokens_db.create_token(session, "ci", Role.OPERATOR, "alice")
        token_id = row.id
    with session_factory.begin() as session:
        stored = session.get(ApiTokenRow, token_id)
        assert stored is not None
        assert secret.startswith("ade_") and secret not in (stored.token_hash, stored.prefix)
        assert stored.token_hash == tokens_db.hash_token(secret)
        found = tokens_db.authenticate(session, secret)
        assert found is not None and found.name == "ci" and found.last_used_at is not None
        assert tokens_db.authenticate(session, secret + "x") is None
        tokens_db.revoke_token(session, token_id)
    with session_factory.begin() as session:
        assert tokens_db.authenticate(session, secret) is None
        with pytest.raises(ConflictError, match="already revoked"):
            tokens_db.revoke_token(session, token_id)


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ([(b"authorization", b"Bearer  ade_x ")], "ade_x"),
        ([(b"authorization", b"Basic dXNlcjpwdw==")], None),  # only bearer tokens count
        ([(b"cookie", b"theme=dark; ade_token=ade_c")], "ade_c"),
        ([(b"cookie", b"ade_token=ade_c"), (b"authorization", b"Bearer ade_h")], "ade_h"),
        ([(b"cookie", b'a="\\x; ade_token=ade_c')], None),  # malformed: ignored, not a 500
        ([], None),
    ],
)
def test_a_token_comes_from_the_bearer_header_else_the_cookie(
    headers: list[tuple[bytes, bytes]], expected: str | None
) -> None:
    assert _credentials({"headers": headers}) == expected
