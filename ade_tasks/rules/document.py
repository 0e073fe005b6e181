"""What every part of a rule document shares: the field patterns and their hints, the bounds
of counts, durations and timeouts, the admission context, and the strict base model."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    ValidationInfo,
)

from ade_tasks.durations import parse_duration
from ade_tasks.json_document import JsonObject
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
ADMISSION: JsonObject = {"admission": True}


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
