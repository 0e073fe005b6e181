"""How domain errors map to HTTP answers, shared by the JSON API and the web page."""

from __future__ import annotations

from ade_tasks.errors import (
    AdeError,
    AdmissionError,
    BrokerUnavailableError,
    ConflictError,
    DatabaseUnavailableError,
    InvalidInputError,
    NotFoundError,
    PolicyViolationError,
)

STATUS_OF: list[tuple[type[AdeError], int, str]] = [
    (NotFoundError, 404, "Not Found"),
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
