"""Request parameters whose OpenAPI declaration is what the server enforces: instants in ISO
8601 (never a bare number), row ids within the database's BIGINT range, and each pagination
cursor in the form its endpoint hands out. A route takes these instead of a bare `datetime`,
`int` or `str`, so the schema a client reads and the 422 it gets agree
(`tests/unit/ade_api/http/test_app_openapi.py` walks every declared constraint)."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated

from fastapi import Path, Query
from pydantic import AfterValidator, BeforeValidator

from ade_tasks.ingress.event import EVENT_SOURCES
from ade_tasks.rules.triggers import KNOWN_TRIGGER_TYPES

#: An ISO 8601 date-time, the offset optional (the routes say what a naive one lacks).
_ISO_INSTANT = re.compile(r"\d{4}-\d\d-\d\d[Tt ]\d\d:\d\d(:\d\d(\.\d+)?)?([Zz]|[+-]\d\d(:?\d\d)?)?")
#: The largest id a BIGINT column holds.
MAX_ID = 2**63 - 1
#: Cursors: url-safe base64 (runs, rules, usage); a version number (rule versions).
BASE64_CURSOR = r"^[A-Za-z0-9_-]{1,2000}={0,2}$"
VERSION_CURSOR = r"^[0-9]{1,18}$"


def _iso_instant(value: object) -> object:
    """Refuse what pydantic would read as a Unix time (`0.5`, `1700000000`) or not at all."""
    if isinstance(value, datetime) or (isinstance(value, str) and _ISO_INSTANT.fullmatch(value)):
        return value
    raise ValueError(
        f"{value!r} is not a date-time; write ISO 8601 with a time zone, e.g. 2026-12-07T09:00:00Z"
    )


#: An instant in ISO 8601 (OpenAPI `format: date-time`); a number is refused with 422.
Instant = Annotated[datetime, BeforeValidator(_iso_instant)]
#: A row id in the path: 1 up to the BIGINT maximum.
RowId = Annotated[int, Path(ge=1, le=MAX_ID)]


#: Every trigger type a filter takes: the known types and their documented aliases.
TRIGGER_TYPE_NAMES = sorted(
    {*KNOWN_TRIGGER_TYPES, "commit", "file.change"}
    | {
        f"git.{name[len('github.') :]}"
        for name in KNOWN_TRIGGER_TYPES
        if name.startswith("github.pr_")
    }
)
#: A trigger type filter (an alias is resolved; anything else is refused with 422).
TriggerTypeFilter = Annotated[
    str | None,
    Query(json_schema_extra={"enum": TRIGGER_TYPE_NAMES}, description="a trigger type or alias"),
]
#: An ingress event source filter: one of the sources, or `webhook:<hook>` (declared here, and
#: refused by the route in its own words: what the sources are).
EVENT_SOURCE = "^(" + "|".join(sorted(EVENT_SOURCES)) + "|webhook:.*)$"


def _cursor_check(pattern: str) -> AfterValidator:
    """Refuse a cursor outside `pattern`, saying what to pass instead."""
    compiled = re.compile(pattern)

    def check(value: str | None) -> str | None:
        if value is not None and not compiled.fullmatch(value):
            raise ValueError(
                f"{value[:40]!r} is not a cursor this API hands out; pass the `next_cursor` "
                "of a previous page"
            )
        return value

    return AfterValidator(check)


_CURSOR = "the `next_cursor` of the previous page"
#: A cursor in url-safe base64 (runs, rules, usage).
Base64Cursor = Annotated[
    str | None,
    Query(json_schema_extra={"pattern": BASE64_CURSOR}, description=_CURSOR),
    _cursor_check(BASE64_CURSOR),
]
#: A cursor that is a version number (a rule's versions).
VersionCursor = Annotated[
    str | None,
    Query(json_schema_extra={"pattern": VERSION_CURSOR}, description=_CURSOR),
    _cursor_check(VERSION_CURSOR),
]
