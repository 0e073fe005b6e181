"""The rule document: when something runs (triggers) and what runs (execution), under which
guardrails. Pydantic validates the whole document at load time so a bad rule never reaches a worker.
"""

from __future__ import annotations

import functools
import math
import re
from datetime import UTC, date, datetime, timedelta
from enum import StrEnum
from typing import Annotated, Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationInfo,
    field_validator,
    model_validator,
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


@functools.lru_cache(maxsize=4096)
def _cron_problem(expr: str, admit: bool, day: date) -> str | None:  # noqa: ARG001 (cache key)
    """Why a 5-field cron is refused (`{value}` stands for the text as written), or None.

    Cached: checking costs about half a millisecond, and the rules of a large directory share
    a few hundred expressions. `day` is part of the key because whether a cron fires within
    the horizon depends on today (`admit`: only admission checks that)."""
    if not croniter.is_valid(expr):
        return "cron {value} is not a valid cron expression"
    if admit:  # a 5-field cron fires somewhere in every 5 years, or never
        from ade_tasks.scheduling import ScheduleError, check_fires

        try:
            check_fires(expr)
        except ScheduleError as exc:
            return exc.message
    return None


CRON_ALIASES = frozenset(
    {"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"}
)
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


def _at_most(limit: int) -> AfterValidator:
    """An upper bound checked when a document is admitted."""

    def check(value: Any, info: ValidationInfo) -> Any:
        if value is not None and admitting(info) and value > limit:
            raise ValueError(f"must be at most {limit:,}")
        return value

    return AfterValidator(check)


class TriggerType(StrEnum):
    """Every trigger type a rule may name (wire values)."""

    SCHEDULE = "schedule"
    MANUAL = "manual"
    WEBHOOK = "webhook"
    GITHUB_PR_OPENED = "github.pr_opened"
    GITHUB_PR_UPDATED = "github.pr_updated"
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
    GIT_PUSH = "git.push"
    GIT_COMMIT = "git.commit"
    LANE_CREATED = "lane.created"
    LANE_DELETED = "lane.deleted"
    LANE_MERGED = "lane.merged"
    FILE_CHANGED = "file.changed"


GITHUB_TYPES = tuple(t.value for t in TriggerType if t.value.startswith("github."))
KNOWN_TRIGGER_TYPES = frozenset(t.value for t in TriggerType)


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


def _normalize_trigger(value: Any) -> Any:
    if isinstance(value, dict) and isinstance(value.get("type"), str):
        kind = canonical_trigger_type(value["type"])
        if kind == "lane.archived":
            raise ValueError(
                "lane.archived is not a trigger here: ADE Tasks lanes are created and deleted, "
                "never archived; use lane.deleted to run when a lane is deleted"
            )
        if kind not in KNOWN_TRIGGER_TYPES:
            known = ", ".join(sorted(KNOWN_TRIGGER_TYPES))
            raise ValueError(f"unknown trigger type {value['type']!r} (known: {known})")
        return {**value, "type": kind}
    return value


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


def _compile_regex(value: str | None, info: ValidationInfo) -> str | None:
    # RE2 (ade_tasks.patterns): what it cannot express is refused at admission, with what to
    # write. A rule stored before RE2 still reads back; its regex then matches nothing (the
    # trigger filter says why) until the rule is fixed and synced again.
    if value is None or not admitting(info):
        return value
    return check_pattern(value)


#: A rule author's regex: compiled with RE2 when the rule is admitted, searched in linear time.
Regex = Annotated[str | None, BeforeValidator(_compile_regex)]


class _Document(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


# --- triggers ------------------------------------------------------------------------------


class ScheduleTrigger(_Document):
    """Fire on a 5-field cron expression (or an `@hourly`-style alias) in an IANA time zone, or
    once: at `run_at` (a timestamp with `Z` or an offset), or `delay_seconds` after the rule's
    current version was stored (so an unchanged rule file synced again does not fire again;
    an edit that stores a new version schedules it anew). Exactly one of the three.

    A one-shot trigger fires once through the same beat claims as a cron slot (catch-up and
    overlap apply); `ade_tasks.one_shots` turns it into a stored scheduled run.
    """

    type: Literal["schedule"]
    cron: str | None = None
    timezone: str = "UTC"
    catchup_window: Duration | None = None
    run_at: datetime | None = None
    delay_seconds: int | None = None

    @property
    def once(self) -> str | None:
        """What makes a one-shot trigger what it is (`run_at=...`, `delay_seconds=N`), or None
        for a cron trigger; a changed value is a different one-shot."""
        if self.run_at is not None:
            return f"run_at={self.run_at.isoformat()}"
        if self.delay_seconds is not None:
            return f"delay_seconds={self.delay_seconds}"
        return None

    @model_validator(mode="after")
    def _exactly_one_when(self) -> ScheduleTrigger:
        if self.cron is None and self.run_at is None and self.delay_seconds is None:
            raise ValueError(
                "a schedule trigger needs exactly one of cron, run_at or delay_seconds; "
                'add e.g. `cron: "0 3 * * *"` or `run_at: 2026-12-24T18:00:00+01:00`'
            )
        return self

    @field_validator("cron")
    @classmethod
    def _valid_cron(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return None
        expr = " ".join(value.split())
        if expr.startswith("@"):
            if expr not in CRON_ALIASES:
                raise ValueError(
                    f"unknown cron alias {value!r} (known: {', '.join(sorted(CRON_ALIASES))})"
                )
            return expr
        if len(expr.split(" ")) != 5:
            raise ValueError(
                f"cron {value!r} must have 5 fields (minute hour day-of-month month day-of-week)"
            )
        problem = _cron_problem(expr, admitting(info), datetime.now(UTC).date())
        if problem is not None:
            raise ValueError(problem.replace("{value}", repr(value)))
        return expr

    @field_validator("timezone")
    @classmethod
    def _valid_zone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(
                f"unknown time zone {value!r}; use an IANA name such as Europe/Berlin or UTC"
            ) from None
        return value

    @field_validator("catchup_window")
    @classmethod
    def _window_within_retention(cls, value: timedelta | None) -> timedelta | None:
        return check_catchup_window(value)

    @field_validator("run_at", mode="before")
    @classmethod
    def _zoned_run_at(cls, value: Any, info: ValidationInfo) -> Any:
        from ade_tasks.scheduling import check_zoned

        if info.data.get("cron") is not None and value is not None:
            raise ValueError(_ONE_WHEN.format(field="run_at", other="cron"))
        return None if value is None else check_zoned(value, "run_at")

    @field_validator("run_at")
    @classmethod
    def _run_at_not_past(cls, value: datetime | None, info: ValidationInfo) -> datetime | None:
        if value is None:
            return None
        from ade_tasks.scheduling import check_not_past

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


class ManualTrigger(_Document):
    """An operator's run from the CLI or the API."""

    type: Literal["manual"]


class WebhookTrigger(_Document):
    """A custom webhook `POST /api/v1/webhooks/{hook}` whose JSON body matches `filters`."""

    type: Literal["webhook"]
    hook: str = Field(pattern=SLUG)
    filters: dict[str, Any] = Field(default_factory=dict)


class GithubTrigger(_Document):
    """A GitHub webhook event, narrowed by filters (all given filters must match)."""

    type: Literal[GITHUB_TYPES]  # type: ignore[valid-type]
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


class GitTrigger(_Document):
    """A push or commit in a configured repository."""

    type: Literal["git.push", "git.commit"]
    repo: str | None = None
    branches: list[str] = Field(default_factory=list)
    paths: list[str] = Field(default_factory=list)


class LaneTrigger(_Document):
    """A lane (git worktree) created or deleted by another run, or its branch merged (a
    merged GitHub pull request from the lane's branch)."""

    type: Literal["lane.created", "lane.deleted", "lane.merged"]
    lanes: list[str] = Field(default_factory=list)


class FileTrigger(_Document):
    """Files matching `paths` changed in the project; paths matching `exclude` do not count."""

    type: Literal["file.changed"]
    paths: list[str] = Field(min_length=1)
    exclude: list[str] = Field(default_factory=list)


Trigger = Annotated[
    Annotated[
        ScheduleTrigger
        | ManualTrigger
        | WebhookTrigger
        | GithubTrigger
        | GitTrigger
        | LaneTrigger
        | FileTrigger,
        Field(discriminator="type"),
    ],
    BeforeValidator(_normalize_trigger),
]


class ToolPolicy(_Document):
    """Which tools an agent may call; the engine enforces it, not the model.

    `sandbox_root` (relative to the worktree; default the worktree) bounds writes and commands.
    By default the read-only tools are allowed and everything else falls to `fallback`
    (`deny`); `todo` and `report` are always allowed unless denied.
    """

    allowed_tools: list[str] = Field(
        default_factory=lambda: ["read_file", "list_dir", "glob", "grep"]
    )
    denied_tools: list[str] = Field(default_factory=list)
    fallback: Literal["allow", "deny", "ask"] = "deny"
    sandbox_root: str | None = None


ToolPalette = Literal["repo", "git", "tests", "github", "notify"]


class AgentSession(_Document):
    """What an agent session is, wherever it runs: a whole rule or one step of a chain.

    The session works in its lane's worktree (or the project root; `plan` mode is read-only).
    `max_tokens` and `max_cost_usd` bound one session (the rule's daily budget bounds all its
    sessions of a day); cost comes from the per-model price table in settings.
    `approval_timeout_min` declines a tool call nobody answered in time (default: wait).
    """

    provider: Literal["openai", "anthropic", "claude-code", "codex"]
    model: str
    prompt: str = Field(min_length=1)
    system: str | None = None
    system_mode: Literal["append", "replace"] = "append"
    permission_mode: Literal["plan", "edit", "full-auto"] = "plan"
    tool_palette: list[ToolPalette] = Field(default_factory=lambda: list[ToolPalette](["repo"]))
    policy: ToolPolicy = Field(default_factory=ToolPolicy)
    max_turns: int = Field(default=30, ge=1, le=500)
    max_tokens_per_turn: int = Field(default=4096, ge=256, le=200_000)
    max_tokens: Annotated[int | None, _at_most(MAX_TOKENS)] = Field(default=None, gt=0)
    max_cost_usd: Annotated[float | None, _at_most(MAX_USD)] = Field(default=None, gt=0)
    approval_timeout_min: float | None = Field(default=None, gt=0, le=60 * 24 * 30)
    # `narrow`: a prompt that interpolates outsiders' text leaves the agent read-only + report.
    untrusted_input: Literal["narrow", "allow"] = "narrow"

    @model_validator(mode="after")
    def _enforceable(self, info: ValidationInfo) -> AgentSession:
        if admitting(info):
            problem = unenforceable_on_codex(self) if self.provider == "codex" else None
            if problem is not None:
                raise ValueError(problem)
        return self


def unenforceable_on_codex(session: AgentSession) -> str | None:
    """What a codex session of this rule could do that the engine could not stop, or None.

    Codex (0.169, workspace-write) applies file changes inside its workspace without asking
    its client, and has no turn limit; a rule that relies on either is refused, not run and
    reported afterwards.
    """
    from ade_tasks.agents.policy import matching_pattern  # the policy module imports this one

    if "max_turns" in session.model_fields_set:
        return (
            "max_turns cannot be enforced on provider codex (it has no turn limit): remove it; "
            "timeout_sec, max_tokens and max_cost_usd bound a codex session"
        )
    if session.permission_mode == "plan":
        return None
    policy = session.policy
    writes = ("write_file", "edit_file")
    denied = [t for t in writes if matching_pattern(t, policy.denied_tools)]
    allowed = all(matching_pattern(t, policy.allowed_tools) for t in writes)
    if not denied and policy.sandbox_root is None and (allowed or policy.fallback == "allow"):
        return None
    why = (
        f"policy.denied_tools names {', '.join(denied)}"
        if denied
        else "policy.sandbox_root is set"
        if policy.sandbox_root is not None
        else f"its fallback {policy.fallback} applies to writes no allowed_tools entry names"
    )
    return (
        f"policy cannot be enforced on provider codex in permission_mode {session.permission_mode}"
        f": codex applies file changes inside its workspace without asking, so the engine cannot "
        f"refuse or ask for them ({why}). Allow writes (policy.allowed_tools: [write_file, "
        "edit_file], no sandbox_root), use permission_mode: plan, or use provider claude-code"
    )


# --- execution -----------------------------------------------------------------------------


def _clamp_timeout(value: Any) -> float:
    seconds = parse_duration(value).total_seconds()
    return min(max(seconds, MIN_STEP_TIMEOUT_SEC), MAX_STEP_TIMEOUT_SEC)


StepTimeout = Annotated[float, BeforeValidator(_clamp_timeout)]
EnvName = r"[A-Za-z_][A-Za-z0-9_]*"


class _Step(_Document):
    """What every step of a built-in chain has, whatever its action.

    `condition` is a small safe expression (see `ade_tasks.conditions`); a false condition
    records the step as skipped. `retry` re-runs a failed step up to 5 times with exponential
    backoff from 400 ms. `always_run` steps run even after an earlier failure, like `finally`,
    and the original failure stays the run's outcome; a step whose condition asks about a
    failure (`failure()`, `failed('tests')`) is `always_run`, so it is evaluated when it can
    be true. `lane` runs the step in a named lane, in
    the lane created earlier in this run (`created`), or in the project root (`project`); by
    default a step runs in the run's lane when it has one, else in the project root.
    """

    id: str = Field(default="", pattern=STEP_ID)
    condition: str | None = None
    retry: int = Field(default=0, ge=0, le=5)
    continue_on_failure: bool = False
    always_run: bool = False
    timeout_sec: StepTimeout = DEFAULT_STEP_TIMEOUT_SEC
    lane: str | None = None

    @model_validator(mode="after")
    def _failure_steps_always_run(self) -> _Step:
        from ade_tasks.conditions import asks_about_failure  # it imports templating only

        # "Only if an earlier step failed" must not need a second flag to ever be true.
        if self.condition and not self.always_run and asks_about_failure(self.condition):
            object.__setattr__(self, "always_run", True)
        return self


class _CommandStep(_Step):
    command: str | list[str]
    cwd: str = "."
    env: dict[str, str] = Field(default_factory=dict)

    @field_validator("command")
    @classmethod
    def _non_empty(cls, value: str | list[str]) -> str | list[str]:
        if not value or (isinstance(value, str) and not value.strip()):
            raise ValueError("command must not be empty")
        return value

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            if not re.fullmatch(EnvName, name):
                raise ValueError(f"{name!r} is not a valid environment variable name")
        return value


class RunCommandAction(_CommandStep):
    """Run a command in the project: a string runs through `/bin/sh -c`, a list runs as argv."""

    type: Literal["run-command"]


class RunTestsAction(_CommandStep):
    """Run the project's tests; JUnit XML the command writes becomes the step's result.

    The command finds a report path in `$ADE_JUNIT_XML` (e.g. `pytest --junitxml=$ADE_JUNIT_XML`);
    `junit` names further report files (globs relative to the step's directory).
    """

    type: Literal["run-tests"]
    junit: list[str] = Field(default_factory=list)


class CreateLaneAction(_Step):
    """Create a lane: a git worktree on a new branch from `base`, used by the later steps."""

    type: Literal["create-lane"]
    name: str = "{{rule.id}} {{date}}"
    base: str = "HEAD"
    branch_prefix: str = Field(default="ade/", pattern=BRANCH_PREFIX)


class DeleteLaneAction(_Step):
    """Delete a lane: the named one, else the one created in this run, else the trigger's."""

    type: Literal["delete-lane"]
    target: str | None = None
    after_minutes: float = Field(default=0, ge=0, le=60 * 24 * 30)
    force: bool = False
    #: The remote whose copy of the branch is deleted too (naming one implies
    #: `delete_remote_branch: true`); `origin` when only `delete_remote_branch` is set.
    delete_remote: str | None = None
    #: false keeps the lane's local branch (only the worktree goes).
    delete_branch: bool = True
    delete_remote_branch: bool | None = None

    @model_validator(mode="after")
    def _remote_consistent(self) -> DeleteLaneAction:
        if self.delete_remote_branch is False and self.delete_remote:
            raise ValueError(
                f"delete_remote names the remote {self.delete_remote!r} but "
                "delete_remote_branch is false; drop delete_remote to keep the remote branch, "
                "or delete_remote_branch to delete it"
            )
        return self

    @property
    def remote(self) -> str | None:
        """The remote to delete the branch on, or None to leave remotes alone."""
        if self.delete_remote_branch or self.delete_remote:
            return self.delete_remote or "origin"
        return None


class PredictConflictsAction(_Step):
    """List the files that would conflict when the lane's branch merges into its base."""

    type: Literal["predict-conflicts"]
    target: str | None = None
    base: str | None = None


class AdeActionStep(_Step):
    """Call one allow-listed internal action (`domain.action`) with typed arguments."""

    type: Literal["ade-action"]
    action: str = Field(pattern=ADE_ACTION_NAME)
    args: dict[str, Any] = Field(default_factory=dict)


class AgentSessionStep(_Step, AgentSession):
    """An agent session as one step of a chain: its prompt sees the earlier steps' outputs,
    and it works in the step's lane like any other step."""

    type: Literal["agent-session"]
    timeout_sec: StepTimeout = MAX_STEP_TIMEOUT_SEC


ACTION_MODELS: dict[str, type[_Step]] = {
    "run-command": RunCommandAction,
    "run-tests": RunTestsAction,
    "create-lane": CreateLaneAction,
    "delete-lane": DeleteLaneAction,
    "predict-conflicts": PredictConflictsAction,
    "ade-action": AdeActionStep,
    "agent-session": AgentSessionStep,
}
KNOWN_ACTION_TYPES = tuple(ACTION_MODELS)
#: Step fields that may hold `{{...}}` templates and `${env:NAME}` secret references.
TEMPLATED_FIELDS = ("command", "cwd", "env", "junit", "name", "base", "target", "args")
LANE_STEPS = ("create-lane", "delete-lane", "predict-conflicts")


def _known_action(value: Any) -> Any:
    if isinstance(value, dict) and value.get("type") not in KNOWN_ACTION_TYPES:
        available = ", ".join(KNOWN_ACTION_TYPES)
        if "type" not in value:
            raise ValueError(f"the step has no type; add `type:` with one of: {available}")
        raise ValueError(f"unknown action type {value['type']!r} (available: {available})")
    return value


Action = Annotated[
    Annotated[
        RunCommandAction
        | RunTestsAction
        | CreateLaneAction
        | DeleteLaneAction
        | PredictConflictsAction
        | AdeActionStep
        | AgentSessionStep,
        Field(discriminator="type"),
    ],
    BeforeValidator(_known_action),
]


class BuiltinExecution(_Document):
    """An ordered chain of deterministic built-in actions."""

    kind: Literal["built-in"]
    queue: str | None = None
    actions: list[Action] = Field(min_length=1)

    @model_validator(mode="before")
    @classmethod
    def _steps_check_out(cls, value: Any, info: ValidationInfo) -> Any:
        # At admission `rules.loader.parse_rule` runs these checks beside the structural ones
        # and reports each at its field; a document read back (or built in code) is refused
        # whole, so a stored rule that no longer passes them never dispatches.
        if admitting(info) or not isinstance(value, dict):
            return value
        from ade_tasks.rules.checks import step_problems  # it imports this module

        problems = step_problems({"execution": value})
        if problems:
            raise ValueError("; ".join(f"{f.removeprefix('execution.')}: {r}" for f, r in problems))
        return value

    @model_validator(mode="after")
    def _step_ids(self) -> BuiltinExecution:
        for index, action in enumerate(self.actions):
            object.__setattr__(action, "id", action.id or default_step_id(action.type, index))
        return self


def default_step_id(action_type: str, index: int) -> str:
    """The id of a step that names none: its type and its position, e.g. `run-command-2`."""
    return f"{action_type}-{index + 1}"


class AgentExecution(AgentSession):
    """A rule whose whole work is one AI coding-agent session under a permission policy.

    It runs as a chain of one `agent-session` step named `session`; `lane` works as a step's
    `lane` does (by default the trigger's lane, e.g. of a `lane.created` event).
    """

    kind: Literal["agent-session"]
    queue: str | None = None
    lane: str | None = None

    @property
    def actions(self) -> list[AgentSessionStep]:
        """The chain this execution runs: its one step, `session`."""
        fields = self.model_dump(exclude={"kind", "queue"}, exclude_none=True)
        return [
            AgentSessionStep.model_validate({**fields, "id": "session", "type": "agent-session"})
        ]


Execution = Annotated[BuiltinExecution | AgentExecution, Field(discriminator="kind")]


# --- guardrails, outputs -------------------------------------------------------------------


class OverlapPolicy(StrEnum):
    """What a new trigger does while a run of the same rule is active."""

    SKIP = "skip"
    BUFFER_ONE = "buffer-one"
    BUFFER_ALL = "buffer-all"
    CANCEL_OTHER = "cancel-other"
    ALLOW_ALL = "allow-all"


class Budget(_Document):
    """Daily caps per billing code."""

    tokens_per_day: Annotated[int | None, _at_most(MAX_TOKENS)] = Field(default=None, gt=0)
    cost_per_day_usd: Annotated[float | None, _at_most(MAX_USD)] = Field(default=None, gt=0)
    run_seconds_per_day: Annotated[int | None, _at_most(MAX_RUN_SECONDS_PER_DAY)] = Field(
        default=None, gt=0
    )


class Guardrails(_Document):
    """Limits the engine holds every run of the rule to."""

    max_duration_min: float = Field(default=60, gt=0, le=720)
    overlap: OverlapPolicy | None = None
    max_concurrent: Annotated[int | None, _at_most(MAX_CONCURRENT)] = Field(default=None, ge=1)
    rate_limit: str | None = Field(default=None, pattern=RATE_LIMIT)
    budget: Budget = Field(default_factory=Budget)
    allowed_paths: list[str] = Field(default_factory=list)
    allowed_lanes: list[str] = Field(default_factory=list)
    require_human: bool = False
    verify_before_publish: bool = False

    def overlap_for(self, trigger_type: str) -> OverlapPolicy:
        """The overlap policy for a trigger: the rule's, else `skip` for schedules and
        `allow-all` for everything else."""
        if self.overlap is not None:
            return self.overlap
        return OverlapPolicy.SKIP if trigger_type == "schedule" else OverlapPolicy.ALLOW_ALL

    def concurrency_limit(self, policy: OverlapPolicy) -> int | None:
        """How many runs may be active at once under `policy` (None: no limit).

        `allow-all` is unlimited unless `max_concurrent` is set (then excess runs wait in a
        buffer); every other policy allows `max_concurrent` runs, one by default.
        """
        if policy is OverlapPolicy.ALLOW_ALL:
            return self.max_concurrent
        return self.max_concurrent or 1

    def buffer_limit(self) -> int | None:
        """The limit under which buffered runs are released (None: this rule never buffers)."""
        if self.overlap in (OverlapPolicy.SKIP, OverlapPolicy.CANCEL_OTHER):
            return None
        return self.concurrency_limit(self.overlap or OverlapPolicy.ALLOW_ALL)


class Disposition(StrEnum):
    """Where a finished run's result goes."""

    EVIDENCE_ONLY = "evidence-only"
    COMMENT_ONLY = "comment-only"
    OPEN_PR = "open-pr"
    NOTIFY = "notify"


class Outputs(_Document):
    """How the run's result is published (see the README's "Outputs" section).

    `comment-only` comments on the triggering GitHub PR or issue (else the result stays in the
    run log), `open-pr` pushes the run's lane branch to `remote` and opens a draft PR on `repo`
    (default: the trigger's repository), `notify` posts to a Slack-compatible webhook whose URL
    is a secret (`notify_url: ${env:NAME}`). GitHub and webhook calls are retried `retry` times
    with exponential backoff from 400 ms.
    """

    disposition: Disposition = Disposition.EVIDENCE_ONLY
    notify_url: str | None = None
    repo: str | None = Field(default=None, pattern=REPO_NAME)
    remote: str = "origin"
    pr_title: str = "{{rule.name}}"
    pr_base: str | None = None
    retry: int = Field(default=3, ge=0, le=5)

    @model_validator(mode="after")
    def _notify_needs_url(self) -> Outputs:
        if self.disposition is Disposition.NOTIFY and not self.notify_url:
            raise ValueError(
                "disposition notify needs notify_url, e.g. notify_url: ${env:SLACK_WEBHOOK_URL}"
            )
        if self.notify_url is not None and "${env:" not in self.notify_url:
            raise ValueError(
                "notify_url is a credential: name it as a secret the workers hold, e.g. "
                "notify_url: ${env:SLACK_WEBHOOK_URL}, never the URL itself"
            )
        return self


class Verification(_Document):
    """A command whose success verifies the run's change before publishing.

    It runs after the steps (in the run's lane, if it has one) as step `verify`. When it fails,
    nothing is published and the run lands in `verification-required`; with `required` the run
    also fails. `required` without a command leaves every run `verification-required`.
    """

    command: str | None = None
    required: bool = False


class InputSpec(_Document):
    """A typed input a manual run may supply (like GitHub's workflow_dispatch)."""

    type: Literal["string", "boolean", "number", "choice"] = "string"
    description: str = ""
    required: bool = False
    default: str | bool | float | None = None
    options: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _choice_has_options(self) -> InputSpec:
        if self.type == "choice" and not self.options:
            raise ValueError("a choice input needs a non-empty `options` list")
        return self


# --- the rule ------------------------------------------------------------------------------

DEFAULT_QUEUES = {"built-in": "ade.builtin", "agent-session": "ade.agent"}


class Rule(_Document):
    """One automation rule, exactly as written in a rules file or sent to the API.

    `review_required: true` puts every finished run in the review queue (`pending-review`);
    by default a deterministic run that succeeded with no findings lands in `completed-clean`
    and only agent runs are gated by confidence (`review_profile`, `review_threshold`; see
    `ade_tasks.review`).
    """

    id: str = Field(pattern=SLUG)
    name: str = ""
    description: str = ""
    enabled: bool = True
    project: str = "default"
    triggers: list[Trigger] = Field(min_length=1)
    execution: Execution
    guardrails: Guardrails = Field(default_factory=Guardrails)
    outputs: Outputs = Field(default_factory=Outputs)
    verification: Verification = Field(default_factory=Verification)
    review_profile: Literal[
        "quick", "incremental", "full", "security", "release-risk", "cross-repo-contract"
    ] = "quick"
    review_threshold: float = Field(default=0.65, ge=0, le=1)
    review_required: bool = False
    tool_palette: list[ToolPalette] = Field(default_factory=list)
    billing_code: str = ""
    queue: str | None = Field(default=None, pattern=QUEUE_NAME)
    inputs: dict[str, InputSpec] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _defaults(self) -> Rule:
        if not self.name:
            object.__setattr__(self, "name", self.id)
        if not self.billing_code:
            object.__setattr__(self, "billing_code", f"auto:{self.id}")
        return self

    @property
    def agentic(self) -> bool:
        """Does a run of this rule rest on a model's judgement (an agent-session execution or
        step)? Otherwise it is deterministic: its steps' exit codes are its verdict."""
        return self.execution.kind == "agent-session" or any(
            step.type == "agent-session" for step in self.execution.actions
        )

    @property
    def effective_queue(self) -> str:
        """The queue its runs go to: the rule's own, the execution's, or the kind's default
        (a chain with an agent-session step goes where agent sessions go)."""
        return (
            self.queue
            or self.execution.queue
            or DEFAULT_QUEUES["agent-session" if self.agentic else "built-in"]
        )

    def has_trigger(self, kind: str) -> bool:
        """Does any trigger of this rule have this (canonical) type?"""
        return any(t.type == kind for t in self.triggers)

    def document(self) -> dict[str, Any]:
        """The rule as JSON-ready data (stored in the database)."""
        return self.model_dump(mode="json", exclude_none=True)
