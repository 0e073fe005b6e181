"""The error body every endpoint answers with (RFC 9457 problem+json)."""

from __future__ import annotations

from pydantic import BaseModel


class Problem(BaseModel):
    """An error body (RFC 9457 problem+json)."""

    type: str = "about:blank"
    title: str
    status: int
    detail: str
