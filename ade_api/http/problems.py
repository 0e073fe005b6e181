"""How domain errors map to HTTP answers, shared by the JSON API and the web page."""

from __future__ import annotations

from collections.abc import Mapping

from fastapi.responses import JSONResponse

from ade_tasks.errors import (
    AdeError,
    AdmissionError,
    BrokerUnavailableError,
    ConflictError,
    DatabaseUnavailableError,
    GoneError,
    InvalidInputError,
    NotFoundError,
    PolicyViolationError,
)

PROBLEM = "application/problem+json"
#: What a 503 asks the caller to wait before trying again (the `Retry-After` header): a database
#: restart or failover, or a broker reconnect, is usually over by then.
RETRY_AFTER_SECONDS = 5

STATUS_OF: list[tuple[type[AdeError], int, str]] = [
    (NotFoundError, 404, "Not Found"),
    (GoneError, 410, "Gone"),
    (InvalidInputError, 422, "Invalid Request"),
    (AdmissionError, 409, "Not Admitted"),
    (ConflictError, 409, "Conflict"),
    (PolicyViolationError, 403, "Policy Violation"),
    (BrokerUnavailableError, 503, "Broker Unavailable"),
    (DatabaseUnavailableError, 503, "Database Unavailable"),
]


def status_of(exc: AdeError) -> tuple[int, str] | None:
    """The status code and title of a domain error; None for one no route should raise."""
    for kind, status, title in STATUS_OF:
        if isinstance(exc, kind):
            return status, title
    return None


def retry_after(status: int) -> dict[str, str]:
    """The headers an answer with this status carries: `Retry-After` on a 503."""
    return {"Retry-After": str(RETRY_AFTER_SECONDS)} if status == 503 else {}


def problem(
    status: int, title: str, detail: str, headers: Mapping[str, str] | None = None
) -> JSONResponse:
    """An error response as problem+json (RFC 9457), with `Retry-After` on a 503 and any
    `headers` the error carries (`Allow` on a 405)."""
    body = {"type": "about:blank", "title": title, "status": status, "detail": detail}
    return JSONResponse(
        body,
        status_code=status,
        media_type=PROBLEM,
        headers={**retry_after(status), **(headers or {})},
    )
