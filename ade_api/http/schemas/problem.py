"""The error body every endpoint answers with (RFC 9457 problem+json), and how a route
documents the errors it answers with."""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel

from ade_tasks.json_document import JsonObject

Responses = dict[int | str, JsonObject]
"""A route's OpenAPI response documentation, as FastAPI's `responses=` takes it."""


class Problem(BaseModel):
    """An error body (RFC 9457 problem+json)."""

    type: str = "about:blank"
    title: str
    status: int
    detail: str


def problem_responses(descriptions: Mapping[int, str]) -> Responses:
    """The `responses=` of a route's errors: each status a `Problem`, with what it means."""
    return {
        status: {"model": Problem, "description": description}
        for status, description in descriptions.items()
    }
