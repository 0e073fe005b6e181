"""What every part of a rule document shares: the field patterns and their hints, the bounds
of counts, durations and timeouts, the admission context, and the strict base model."""

from __future__ import annotations

import math
import re
from datetime import timedelta
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    TypeAdapter,
    ValidationInfo,
)

from ade_tasks.patterns import check_pattern

SLUG = r"^[a-z0-9][a-z0-9_.-]{0,62}$"
STEP_ID = r"^$|" + SLUG
REPO_NAME = r"^[\w.-]+/[\w.-]+$"
BRANCH_PREFIX = r"^[A-Za-z0-9._/-]*$"
ADE_ACTION_NAME = r"^[a-z]+\.[a-z_]+$"
RATE_LIMIT = r"^\d+/(second|minute|hour|day)$"
QUEUE_NAME = r"^[\w.:-]+$"
_SLUG_HINT = (
    "write a slug: lowercase letters, digits, '.', '_' and '-', starting with a letter or "
    "digit, at most 63 characters (e.g. nightly-tests)"
)
#: What each field pattern asks for, in the words `rules validate` prints.
PATTERN_HINTS = {
    SLUG: _SLUG_HINT,
    STEP_ID: _SLUG_HINT,
    REPO_NAME: "write owner/name, e.g. acme/api",
    BRANCH_PREFIX: "use letters, digits, '.', '_', '/' and '-' only (e.g. ade/)",
    ADE_ACTION_NAME: "write domain.action, e.g. github.comment",
    RATE_LIMIT: "write a count per unit, e.g. 10/minute (units: second, minute, hour, day)",
    QUEUE_NAME: "use letters, digits, '_', '.', ':' and '-' only (e.g. ade.builtin)",
}
MIN_STEP_TIMEOUT_SEC = 1.0
MAX_STEP_TIMEOUT_SEC = 12 * 3600.0
DEFAULT_STEP_TIMEOUT_SEC = 300.0
OCCURRENCE_RETENTION = timedelta(days=35)


MAX_DURATION = timedelta(days=366)  # the longest duration any field takes, before its own bound
#: Upper bounds of counts and amounts (admission only, see `ADMISSION`).
MAX_CONCURRENT = 10_000
MAX_TOKENS = 10**12
MAX_USD = 10**9
MAX_RUN_SECONDS_PER_DAY = 10**9

#: The validation context of a document being admitted (a rules file, an API write): checks
#: that depend on today (a cron must fire within 5 years) or that are newer than the rules stored
#: already (upper bounds of counts) run only then, so a stored document always reads back and
#: a rule stored before such a check existed is reported by the scheduler, never unreadable.
#: `Rule.model_validate(document, context=ADMISSION)`; `rules.loader.parse_rule` does this.
ADMISSION: dict[str, Any] = {"admission": True}


def admitting(info: ValidationInfo) -> bool:
    """Is this validation the admission of a new document (not a stored one read back)?"""
    return bool(info.context and info.context.get("admission"))


def at_most(limit: int) -> AfterValidator:
    """An upper bound checked when a document is admitted."""

    def check(value: Any, info: ValidationInfo) -> Any:
        if value is not None and admitting(info) and value > limit:
            raise ValueError(f"must be at most {limit:,}")
        return value

    return AfterValidator(check)


def parse_duration(value: Any) -> timedelta:
    """`90`, `"90s"`, `"15m"`, `"2h"`, `"1d"` -> timedelta (a bare number is seconds); at most
    `MAX_DURATION` (366 days) either way, so `1e300` is refused, not an overflow."""
    if isinstance(value, timedelta):
        seconds: float = value.total_seconds()
    elif isinstance(value, int | float) and not isinstance(value, bool):
        seconds = value
    elif isinstance(value, str) and value.startswith("P"):  # ISO 8601, as stored in the database
        seconds = TypeAdapter(timedelta).validate_python(value).total_seconds()
    else:
        match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", str(value))
        if not match:
            raise ValueError(f"{value!r} is not a duration; write e.g. 90s, 15m, 2h or 1d")
        number, unit = float(match[1]), match[2] or "s"
        seconds = number * {"s": 1, "m": 60, "h": 3600, "d": 86400}[unit]
    if isinstance(seconds, float) and not math.isfinite(seconds):
        raise ValueError(f"{value!r} is not a finite duration")
    if abs(seconds) > MAX_DURATION.total_seconds():
        raise ValueError(f"{value!r} is longer than {MAX_DURATION.days} days, the longest duration")
    return timedelta(seconds=seconds)


Duration = Annotated[timedelta, BeforeValidator(parse_duration)]


def compile_regex(value: str | None, info: ValidationInfo) -> str | None:
    # RE2 (ade_tasks.patterns): what it cannot express is refused at admission, with what to
    # write. A rule stored before RE2 still reads back; its regex then matches nothing (the
    # trigger filter says why) until the rule is fixed and synced again.
    if value is None or not admitting(info):
        return value
    return check_pattern(value)


#: A rule author's regex: compiled with RE2 when the rule is admitted, searched in linear time.
Regex = Annotated[str | None, BeforeValidator(compile_regex)]


class Document(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
