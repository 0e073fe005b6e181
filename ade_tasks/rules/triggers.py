"""When a rule runs: its trigger types and the model of each (schedules, manual runs, webhooks,
GitHub, git, lane and file events).

A trigger model names the kinds it answers to in its `type` literal; `TRIGGER_MODELS` lists the
built-in ones (one line each), and the `Trigger` union and the known kinds are derived from that
tuple. A trigger kind is declared whole (its model, matcher and readiness check) and registered
in `ade_tasks.triggers.registry`, which adds the model of a kind from outside this package here
(`ade_tasks.rules.extensions`).
"""

from __future__ import annotations

import functools
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from fnmatch import fnmatchcase
from functools import reduce
from operator import or_
from typing import TYPE_CHECKING, Annotated, ClassVar, Literal, TypeAlias, get_args

from pydantic import (
    BeforeValidator,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from ade_tasks.cron.evaluator import ScheduleError, never_fires, zone_named
from ade_tasks.cron.grammar import CronSyntaxError, parse_cron
from ade_tasks.cron.legacy import admitted_day_match
from ade_tasks.cron.slots import ScheduleSpec, check_not_past, check_zoned
from ade_tasks.durations import MAX_DURATION
from ade_tasks.json_document import JsonObject
from ade_tasks.rules.document import (
    OCCURRENCE_RETENTION,
    REPO_NAME,
    SLUG,
    Document,
    Duration,
    Regex,
    admitting,
)
from ade_tasks.rules.github_events import check_github_trigger
from ade_tasks.states import FINAL_STATUSES, QueueStatus


@functools.lru_cache(maxsize=4096)
def _admitted_cron(text: str, day_match: str | None) -> str:
    """The cron as admission stores it (`n-n` written `n`), or ValueError saying what to write
    (outside the grammar, or no day ever matches).

    Cached: the rules of a large directory share a few hundred expressions."""
    try:
        expr = parse_cron(text)
    except CronSyntaxError as exc:
        raise ValueError(exc.message) from None
    if not expr.can_fire(day_match):
        raise ValueError(never_fires(expr))
    return expr.canonical


@functools.lru_cache(maxsize=4096)
def _admitted_day_match(cron: str, day_match: str | None) -> str | None:
    """The `day_match` admission stores with this cron (cached like `_admitted_cron`)."""
    try:
        return admitted_day_match(parse_cron(cron), day_match)
    except CronSyntaxError:
        return day_match  # the cron's own validator says what is wrong


class TriggerType(StrEnum):
    """Every trigger type a rule may name (wire values)."""

    SCHEDULE = "schedule"
    MANUAL = "manual"
    WEBHOOK = "webhook"
    GITHUB_PR_OPENED = "github.pr_opened"
    GITHUB_PR_UPDATED = "github.pr_updated"
    GITHUB_PR_LABELED = "github.pr_labeled"
    GITHUB_PR_MERGED = "github.pr_merged"
    GITHUB_PR_CLOSED = "github.pr_closed"
    GITHUB_PR_COMMENTED = "github.pr_commented"
    GITHUB_PR_REVIEW_SUBMITTED = "github.pr_review_submitted"
    GITHUB_ISSUE_OPENED = "github.issue_opened"
    GITHUB_ISSUE_LABELED = "github.issue_labeled"
    GITHUB_ISSUE_CLOSED = "github.issue_closed"
    GITHUB_ISSUE_COMMENTED = "github.issue_commented"
    GITHUB_CHECK_RUN_COMPLETED = "github.check_run_completed"
    GITHUB_WORKFLOW_RUN_COMPLETED = "github.workflow_run_completed"
    GITHUB_RELEASE_PUBLISHED = "github.release_published"
    GITHUB_EVENT = "github.event"
    GIT_PUSH = "git.push"
    GIT_COMMIT = "git.commit"
    LANE_CREATED = "lane.created"
    LANE_DELETED = "lane.deleted"
    LANE_MERGED = "lane.merged"
    FILE_CHANGED = "file.changed"
    RUN_FINISHED = "run.finished"


GITHUB_TYPES = tuple(t.value for t in TriggerType if t.value.startswith("github."))


def canonical_trigger_type(name: str) -> str:
    """Resolve the documented aliases: `commit` -> `git.commit`, `git.pr_*` -> `github.pr_*`,
    `file.change` -> `file.changed`. (`lane.archived` is refused at validation: lanes here are
    created and deleted, never archived, so it would only ever have meant deletion.)"""
    if name == "commit":
        return TriggerType.GIT_COMMIT.value
    if name == "file.change":
        return TriggerType.FILE_CHANGED.value
    if name.startswith("git.pr_"):
        return "github." + name.removeprefix("git.")
    return name


def _normalize_trigger(value: object) -> object:
    if isinstance(value, dict) and isinstance(value.get("type"), str):
        kind = canonical_trigger_type(value["type"])
        if kind == "lane.archived":
            raise ValueError(
                "lane.archived is not a trigger here: ADE Tasks lanes are created and deleted, "
                "never archived; use lane.deleted to run when a lane is deleted"
            )
        known_types = known_trigger_types()
        if kind not in known_types:
            known = ", ".join(sorted(known_types))
            raise ValueError(f"unknown trigger type {value['type']!r} (known: {known})")
        return {**value, "type": kind}
    return value


# --- triggers ------------------------------------------------------------------------------


class TriggerDocument(Document):
    """What every trigger model is: a document whose `type` literal names its kinds."""

    #: The field whose value (or one of whose values) an event must carry for the trigger to
    #: start, by which the event-matching index narrows (`ade_tasks.db.rule_index`); None:
    #: every event of the kind is a candidate.
    index_field: ClassVar[str | None] = None

    if TYPE_CHECKING:
        type: str  # each trigger model narrows it to its own literal


class ScheduleTrigger(TriggerDocument):
    """Fire on a 5-field cron expression (or an `@hourly`-style alias) in an IANA time zone, or
    once: at `run_at` (a timestamp with `Z` or an offset), or `delay_seconds` after the rule's
    current version was stored (so an unchanged rule file synced again does not fire again;
    an edit that stores a new version schedules it anew). Exactly one of the three.

    A one-shot trigger fires once through the same beat claims as a cron slot (catch-up and
    overlap apply); `ade_tasks.schedule.one_shots` turns it into a stored scheduled run.
    """

    type: Literal["schedule"]
    day_match: Literal["any", "all"] | None = None  # before cron: its check needs the day rule
    cron: str | None = None
    timezone: str = "UTC"
    catchup_window: Duration | None = None
    run_at: datetime | None = None
    delay_seconds: int | None = None
    dst_gap: Literal["skip", "shift"] | None = None
    dst_repeat: Literal["first", "last", "both"] | None = None

    @property
    def once(self) -> str | None:
        """What makes a one-shot trigger what it is (`run_at=...`, `delay_seconds=N`), or None
        for a cron trigger; a changed value is a different one-shot."""
        if self.run_at is not None:
            return f"run_at={self.run_at.isoformat()}"
        if self.delay_seconds is not None:
            return f"delay_seconds={self.delay_seconds}"
        return None

    def spec(self, rule_id: str, index: int) -> ScheduleSpec:
        """This cron trigger as the scheduler and the previews evaluate it."""
        assert self.cron is not None
        return ScheduleSpec(
            rule_id,
            index,
            self.cron,
            self.timezone,
            self.catchup_window,
            self.day_match,
            self.dst_gap,
            self.dst_repeat,
        )

    @model_validator(mode="before")
    @classmethod
    def _explicit_day_match(cls, data: object, info: ValidationInfo) -> object:
        """At admission, write down the day rule where croniter read the days otherwise, so a
        stored trigger without it is known to be older (`ade_tasks.cron.legacy`)."""
        if not (admitting(info) and isinstance(data, dict) and isinstance(data.get("cron"), str)):
            return data
        day_match = data.get("day_match")
        written = _admitted_day_match(
            data["cron"], day_match if isinstance(day_match, str) else None
        )
        return data if written == day_match else {**data, "day_match": written}

    @model_validator(mode="after")
    def _exactly_one_when(self) -> ScheduleTrigger:
        if self.cron is None and self.run_at is None and self.delay_seconds is None:
            raise ValueError(
                "a schedule trigger needs exactly one of cron, run_at or delay_seconds; "
                'add e.g. `cron: "0 3 * * *"` or `run_at: 2026-12-24T18:00:00+01:00`'
            )
        if self.cron is None:
            for option in ("day_match", "dst_gap", "dst_repeat"):
                if getattr(self, option) is not None:
                    raise ValueError(
                        f"{option} applies to cron schedules only; remove it from this "
                        "run_at / delay_seconds trigger"
                    )
        return self

    @field_validator("cron")
    @classmethod
    def _valid_cron(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return None
        if not admitting(info):
            # A stored trigger is read as stored: if this version cannot evaluate it, that is
            # its own problem (`slots.stored_evaluator`), not a document that cannot be read.
            return value
        return _admitted_cron(" ".join(value.split()), info.data.get("day_match"))

    @field_validator("timezone")
    @classmethod
    def _valid_zone(cls, value: str) -> str:
        try:
            zone_named(value)
        except ScheduleError as exc:
            raise ValueError(exc.message) from None
        return value

    @field_validator("catchup_window")
    @classmethod
    def _window_within_retention(cls, value: timedelta | None) -> timedelta | None:
        return check_catchup_window(value)

    @field_validator("run_at", mode="before")
    @classmethod
    def _zoned_run_at(cls, value: object, info: ValidationInfo) -> object:
        if info.data.get("cron") is not None and value is not None:
            raise ValueError(_ONE_WHEN.format(field="run_at", other="cron"))
        return None if value is None else check_zoned(value, "run_at")

    @field_validator("run_at")
    @classmethod
    def _run_at_not_past(cls, value: datetime | None, info: ValidationInfo) -> datetime | None:
        if value is None:
            return None
        value = value.astimezone(UTC)
        if admitting(info):
            check_not_past(value, info.data.get("catchup_window"), "run_at")
        return value

    @field_validator("delay_seconds")
    @classmethod
    def _valid_delay(cls, value: int | None, info: ValidationInfo) -> int | None:
        if value is None:
            return None
        for other in ("cron", "run_at"):
            if info.data.get(other) is not None:
                raise ValueError(_ONE_WHEN.format(field="delay_seconds", other=other))
        return check_delay(value, "after the rule version is stored")


def check_catchup_window(value: timedelta | None) -> timedelta | None:
    """A catch-up window reaches back at most as far as occurrences are kept."""
    if value is not None and (value < timedelta(0) or value > OCCURRENCE_RETENTION):
        raise ValueError(
            f"catchup_window must be between 0 and {OCCURRENCE_RETENTION.days} days "
            "(occurrences are kept that long)"
        )
    return value


def check_delay(value: int, counted: str) -> int:
    """A `delay_seconds`: 0 up to the longest duration; `counted` says from when."""
    if value < 0:
        raise ValueError(
            f"delay_seconds must be 0 or more (got {value}): it counts the seconds {counted}; "
            "for a fixed time write run_at"
        )
    if value > MAX_DURATION.total_seconds():
        raise ValueError(f"delay_seconds must be at most {int(MAX_DURATION.total_seconds())}")
    return value


_ONE_WHEN = (
    "{field} cannot be combined with {other}: a schedule trigger has exactly one of cron, "
    "run_at and delay_seconds; split it into two triggers"
)


class ManualTrigger(TriggerDocument):
    """An operator's run from the CLI or the API."""

    type: Literal["manual"]


class WebhookTrigger(TriggerDocument):
    """A custom webhook `POST /api/v1/webhooks/{hook}` whose JSON body matches `filters`."""

    type: Literal["webhook"]
    index_field: ClassVar[str | None] = "hook"
    hook: str = Field(pattern=SLUG)
    filters: JsonObject = Field(default_factory=dict)


def _one_or_more(value: object) -> object:
    """`label: agent-fix` is `label: [agent-fix]`."""
    return [value] if isinstance(value, str) else value


class GithubTrigger(TriggerDocument):
    """A GitHub webhook event, narrowed by filters (all given filters must match).

    `github.event` runs on any GitHub event named by `event`; `actions` narrows any GitHub
    trigger to the deliveries with one of those actions; `label` (github.pr_labeled and
    github.issue_labeled) to one of those labels just added. A delivery sent by the engine's own
    GitHub identity (`ADE_GITHUB__BOT_LOGINS`) starts the trigger only with `include_own: true`.
    """

    type: Literal[GITHUB_TYPES]  # type: ignore[valid-type]
    index_field: ClassVar[str | None] = "repo"
    repo: str | None = Field(default=None, pattern=REPO_NAME)
    branches: list[str] = Field(default_factory=list)
    base_branches: list[str] = Field(default_factory=list)
    labels: list[str] = Field(default_factory=list)
    authors: list[str] = Field(default_factory=list)
    author_associations: list[
        Literal[
            "OWNER",
            "MEMBER",
            "COLLABORATOR",
            "CONTRIBUTOR",
            "FIRST_TIME_CONTRIBUTOR",
            "FIRST_TIMER",
            "MANNEQUIN",
            "NONE",
        ]
    ] = Field(default_factory=list)
    title_regex: Regex = None
    body_regex: Regex = None
    keywords: list[str] = Field(default_factory=list)
    draft: bool | None = None
    paths: list[str] = Field(default_factory=list)
    # None rather than empty defaults: a stored rule without them keeps its content hash.
    event: str | None = Field(default=None, pattern=r"^[a-z][a-z0-9_]*$")
    actions: list[str] | None = None
    label: Annotated[list[str] | None, BeforeValidator(_one_or_more)] = None
    include_own: bool | None = None

    @model_validator(mode="after")
    def _fits_its_type(self) -> GithubTrigger:
        check_github_trigger(self.type, self.event, self.actions, self.label)
        return self


class GitTrigger(TriggerDocument):
    """A push or commit in a configured repository."""

    type: Literal["git.push", "git.commit"]
    repo: str | None = None
    branches: list[str] = Field(default_factory=list)
    paths: list[str] = Field(default_factory=list)
    include_own: bool | None = None  # a push by the engine's own identity (see GithubTrigger)


class LaneTrigger(TriggerDocument):
    """A lane (git worktree) created or deleted by another run, or its branch merged (a
    merged GitHub pull request from the lane's branch)."""

    type: Literal["lane.created", "lane.deleted", "lane.merged"]
    lanes: list[str] = Field(default_factory=list)


class FileTrigger(TriggerDocument):
    """Files matching `paths` changed in the project; paths matching `exclude` do not count."""

    type: Literal["file.changed"]
    paths: list[str] = Field(min_length=1)
    exclude: list[str] = Field(default_factory=list)


#: What a `run.finished` trigger's `status` may name: a run's final status, or the review-queue
#: status it lands in when it finishes (not `ignored` / `archived`: an operator sets those later).
RUN_FINISHED_STATUSES = (
    *sorted(s.value for s in FINAL_STATUSES),
    *(s.value for s in QueueStatus if s not in (QueueStatus.IGNORED, QueueStatus.ARCHIVED)),
)


#: A rule id (`SLUG`) or a glob over rule ids (`*`, `?`, `[...]`).
RULE_GLOB = r"^[a-z0-9*?\[][a-z0-9*?\[\]!_.-]*$"


class RunFinishedTrigger(TriggerDocument):
    """A run of another rule finished: `rule` names the rules it follows (ids or globs over
    ids, `fix-*`), `status` the outcomes it starts on (none given: every outcome). A rule
    following itself is refused (`Rule`); longer loops are bounded by the chain depth
    (`ade_tasks.triggers.run_finished`)."""

    type: Literal["run.finished"]
    index_field: ClassVar[str | None] = "rule"
    rule: list[Annotated[str, Field(pattern=RULE_GLOB)]] = Field(min_length=1)
    status: list[str] = Field(default_factory=list)

    @field_validator("rule", mode="before")
    @classmethod
    def _one_or_more(cls, value: object) -> object:
        return [value] if isinstance(value, str) else value

    @field_validator("status", mode="before")
    @classmethod
    def _known_statuses(cls, value: object) -> object:
        value = [value] if isinstance(value, str) else value
        listed = value if isinstance(value, list | tuple | set | frozenset) else ()
        unknown = [s for s in listed if s not in RUN_FINISHED_STATUSES]
        if unknown:
            raise ValueError(
                f"unknown run status {', '.join(map(repr, unknown))}; a run.finished trigger "
                f"starts on {', '.join(RUN_FINISHED_STATUSES)}"
            )
        return value

    def follows(self, rule_id: str) -> bool:
        """Does this trigger follow the runs of rule `rule_id`?"""
        return any(fnmatchcase(rule_id, glob) for glob in self.rule)


#: The trigger models rules may name: one line per model.
TRIGGER_MODELS: tuple[type[TriggerDocument], ...] = (
    ScheduleTrigger,
    ManualTrigger,
    WebhookTrigger,
    GithubTrigger,
    GitTrigger,
    LaneTrigger,
    FileTrigger,
    RunFinishedTrigger,
)


def trigger_kinds(model: type[TriggerDocument]) -> tuple[str, ...]:
    """The kinds (`type` values) a trigger model answers to."""
    return tuple(str(kind) for kind in get_args(model.model_fields["type"].annotation))


def known_trigger_types() -> frozenset[str]:
    """Every trigger kind a rule may name, as registered now."""
    return _kinds_of(TRIGGER_MODELS)


@functools.lru_cache(maxsize=4)
def _kinds_of(models: tuple[type[TriggerDocument], ...]) -> frozenset[str]:
    """Cached: every trigger a rule names is checked against them."""
    return frozenset(kind for model in models for kind in trigger_kinds(model))


KNOWN_TRIGGER_TYPES = known_trigger_types()


def trigger_union() -> object:
    """The pydantic type of one trigger: the registered models, told apart by `type`."""
    members = reduce(or_, TRIGGER_MODELS)
    return Annotated[
        Annotated[members, Field(discriminator="type")], BeforeValidator(_normalize_trigger)
    ]


if TYPE_CHECKING:
    Trigger: TypeAlias = TriggerDocument
else:
    Trigger = trigger_union()
