"""The allow-list of internal actions an `ade-action` step may call, and their typed arguments.

An `ade-action` step names one action `domain.action` and passes it `args`; only the actions
in `CATALOG` exist, each with a pydantic model of its arguments (unknown arguments are refused),
a one-line description, and two flags: `admin_only` (it can change other rules' runs or the
rules themselves) and `side_effect_free` (it only reads, so `require_human` lets it run before
the approval gate).

Checks happen twice. At load time (`check_step`, called by the rule model) an unknown action,
an unknown or ill-typed argument and an admin-only action on a non-admin rule are refused with
the field and the reason; a string argument holding `{{...}}` or `${env:NAME}` is only known at
run time, so its type is not checked then. At run time (`validate_args`) the rendered
arguments are validated in full.

Who counts as admin: rules carry no author role yet (tokens and roles arrive with a later
change). Rules loaded from the cluster's rules directory are written by whoever administers
the cluster, so loading a rule document treats it as admin, and the executor
(`ade_workers.actions.ade_action`) re-checks admin-only actions against the rule's source in
the database: `file` counts as admin, anything else (API-created rules) does not.

A rule acts as itself, never as a person: arguments naming an identity (`IDENTITY_FIELDS`:
author, user, token, role, ...) are stripped before validation, with a note, so no rule can
make an action look as if someone else had asked for it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ade_tasks.errors import InvalidInputError
from ade_tasks.json_document import JsonObject
from ade_tasks.rules.document import SLUG
from ade_tasks.rules.messages import describe

#: Markers of a value that is only known once the step runs: a template or a secret reference.
DEFERRED_MARKERS = ("{{", "${env:")
REPO_PATTERN = r"^[\w.-]+/[\w.-]+$"
# GitHub's own limits: a comment body holds 65,536 characters, a label name 50.
GITHUB_BODY_MAX = 65_536
GITHUB_LABEL_MAX = 50
# Slack's limit on the text of one message.
NOTIFY_TEXT_MAX = 40_000
# What a value of a patterned argument must look like, said in words rather than as a regex.
_PATTERN_HINTS = {
    "repo": "write the repository as owner/name, e.g. acme/api",
    "rule_id": "write a rule id: lower-case letters, digits, '.', '_' and '-'",
}

#: Argument names that would say who asks for an action; a rule always acts as itself.
IDENTITY_FIELDS = frozenset(
    {
        "author",
        "user",
        "username",
        "login",
        "actor",
        "sender",
        "requested_by",
        "on_behalf_of",
        "as_user",
        "run_as",
        "impersonate",
        "identity",
        "token",
        "auth",
        "authorization",
        "credentials",
        "role",
        "roles",
    }
)


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RunsCancelArgs(_Args):
    """Arguments of `runs.cancel`."""

    run_id: str = Field(min_length=1, max_length=36, description="the run to cancel (its full id)")


class RuleIdArgs(_Args):
    """Arguments of `rules.enable` and `rules.disable`."""

    rule_id: str = Field(pattern=SLUG, description="the rule's id")


class LanesListArgs(_Args):
    """Arguments of `lanes.list` (active lanes unless `status` says otherwise)."""

    status: Literal["active", "deleted", "all"] = Field(
        default="active", description="which lanes to list"
    )


class GithubCommentArgs(_Args):
    """Arguments of `github.comment`."""

    repo: str = Field(pattern=REPO_PATTERN, description="the repository, owner/name")
    number: int = Field(ge=1, description="the issue or pull request number")
    body: str = Field(
        min_length=1,
        max_length=GITHUB_BODY_MAX,
        description="the comment (Markdown; templates allowed)",
    )


Label = Annotated[str, Field(min_length=1, max_length=GITHUB_LABEL_MAX)]


class GithubLabelsArgs(_Args):
    """Arguments of `github.add_labels`."""

    repo: str = Field(pattern=REPO_PATTERN, description="the repository, owner/name")
    number: int = Field(ge=1, description="the issue or pull request number")
    labels: list[Label] = Field(min_length=1, max_length=20, description="the labels to add")


class NotifySendArgs(_Args):
    """Arguments of `notify.send`; `url` is a secret reference such as `${env:SLACK_URL}`."""

    url: str = Field(
        min_length=1, description="the incoming webhook, as a secret reference ${env:NAME}"
    )
    text: str = Field(
        min_length=1, max_length=NOTIFY_TEXT_MAX, description="the message (templates allowed)"
    )


class CleanupsListArgs(_Args):
    """Arguments of `cleanups.list` (every cleanup unless `status` narrows it)."""

    status: Literal["scheduled", "executing", "done", "failed", "cancelled", "all"] = Field(
        default="all", description="which cleanups to list"
    )


class CleanupsCancelArgs(_Args):
    """Arguments of `cleanups.cancel`."""

    cleanup_id: int = Field(ge=1, description="the cleanup's id, as `cleanups.list` shows it")


@dataclass(frozen=True)
class AdeAction:
    """One allow-listed internal action: its arguments, what it does, who may call it."""

    name: str
    args: type[BaseModel]
    description: str
    admin_only: bool = False
    side_effect_free: bool = False
    #: Arguments that are credentials: they must be written as `${env:NAME}` references.
    secret_args: tuple[str, ...] = ()


CATALOG: Mapping[str, AdeAction] = {
    spec.name: spec
    for spec in (
        AdeAction(
            "runs.cancel",
            RunsCancelArgs,
            "Cancel a queued, running or waiting run of any rule.",
            admin_only=True,
        ),
        AdeAction(
            "rules.enable", RuleIdArgs, "Enable a rule's automatic triggers.", admin_only=True
        ),
        AdeAction(
            "rules.disable", RuleIdArgs, "Disable a rule's automatic triggers.", admin_only=True
        ),
        AdeAction("lanes.list", LanesListArgs, "List lanes, newest first.", side_effect_free=True),
        AdeAction(
            "github.comment",
            GithubCommentArgs,
            "Post (or, on a retried run, update) a comment on a GitHub issue or pull request.",
        ),
        AdeAction(
            "github.add_labels",
            GithubLabelsArgs,
            "Add labels to a GitHub issue or pull request.",
        ),
        AdeAction(
            "notify.send",
            NotifySendArgs,
            "Post a message to a Slack-compatible incoming webhook.",
            secret_args=("url",),
        ),
        AdeAction(
            "cleanups.list",
            CleanupsListArgs,
            "List deferred lane deletions, soonest first.",
            side_effect_free=True,
        ),
        AdeAction("cleanups.cancel", CleanupsCancelArgs, "Cancel a deferred lane deletion."),
    )
}


def available() -> str:
    """The allow-listed action names, sorted and comma-separated (for messages)."""
    return ", ".join(sorted(CATALOG))


def get_action(name: str) -> AdeAction:
    """The catalog entry of `name`, or InvalidInputError listing the allow-list."""
    spec = CATALOG.get(name)
    if spec is None:
        raise InvalidInputError(_unknown(name))
    return spec


def strip_identity(args: Mapping[str, Any]) -> tuple[JsonObject, list[str]]:
    """`args` without identity arguments (see `IDENTITY_FIELDS`), and a note per one dropped."""
    kept: JsonObject = {}
    notes: list[str] = []
    for key, value in args.items():
        if _normalized(key) in IDENTITY_FIELDS:
            notes.append(
                f"ignored argument {key!r}: an ade-action always acts as its rule, never on "
                "behalf of a person, so identity arguments are dropped"
            )
        else:
            kept[key] = value
    return kept, notes


def check_step(action: str, args: Mapping[str, Any], *, admin: bool) -> list[str]:
    """Load-time problems of an `ade-action` step (empty: it may be loaded)."""
    spec = CATALOG.get(action)
    if spec is None:
        return [_unknown(action)]
    problems: list[str] = []
    if spec.admin_only and not admin:
        problems.append(
            f"ade-action {action!r} is admin-only: it can change other rules and their runs, "
            "so only rules from the cluster's rules directory (written by its administrators) "
            "may call it; ask an administrator to add the rule there"
        )
    clean, _ = strip_identity(args)
    problems += _secret_problems(spec, clean)
    problems += [
        problem
        for loc, problem in _arg_problems(spec, clean)
        if not _deferred_at(clean, loc)  # known only at run time; validate_args checks it then
    ]
    return problems


def validate_args(action: str, args: Mapping[str, Any]) -> BaseModel:
    """The run-time arguments of `action` as its typed model; InvalidInputError naming each
    wrong argument otherwise (strip identity arguments first, see `strip_identity`)."""
    spec = get_action(action)
    try:
        return spec.args.model_validate(dict(args))
    except ValidationError:
        problems = [problem for _, problem in _arg_problems(spec, args)]
        raise InvalidInputError(f"ade-action {action!r}: " + "; ".join(problems)) from None


def _unknown(action: str) -> str:
    return f"ade-action {action!r} is not on the allow-list; available: {available()}"


def _normalized(key: str) -> str:
    return key.strip().lower().replace("-", "_")


def _arg_problems(
    spec: AdeAction, args: Mapping[str, Any]
) -> list[tuple[tuple[int | str, ...], str]]:
    """Each argument error as (its location, `args.<field>: reason`)."""
    try:
        spec.args.model_validate(dict(args))
    except ValidationError as exc:
        fields = ", ".join(spec.args.model_fields) or "none"
        found = []
        for error in exc.errors(include_url=False):
            loc = tuple(error["loc"])
            where = "args." + ".".join(str(part) for part in loc) if loc else "args"
            if error["type"] == "extra_forbidden":
                reason = f"unknown argument of {spec.name}; its arguments: {fields}"
            elif error["type"] == "missing":
                reason = f"{spec.name} needs this argument"
            elif error["type"] == "string_pattern_mismatch" and loc[0] in _PATTERN_HINTS:
                reason = f"{error['input']!r} does not fit; {_PATTERN_HINTS[str(loc[0])]}"
            elif error["type"] == "value_error":  # our own validators' words
                reason = error["msg"].removeprefix("Value error, ")
            else:
                reason = describe(error)  # pydantic's, said in the project's words
            found.append((loc, f"{where}: {reason}"))
        return found
    return []


def _deferred_at(args: Mapping[str, Any], loc: tuple[int | str, ...]) -> bool:
    """True when the value at `loc`, or one it is inside, is a string resolved at run time."""
    value: Any = args
    for part in loc:
        try:
            value = value[part]
        except (KeyError, IndexError, TypeError):
            return False
        if isinstance(value, str) and any(marker in value for marker in DEFERRED_MARKERS):
            return True
    return False


def _secret_problems(spec: AdeAction, args: Mapping[str, Any]) -> list[str]:
    problems = []
    for name in spec.secret_args:
        value = args.get(name)
        if value is None:
            continue  # a missing argument is reported by its model
        if not isinstance(value, str) or "${env:" not in value:
            problems.append(
                f"args.{name}: {spec.name}'s {name} is a credential; write it as a secret "
                f"reference such as ${{env:SLACK_WEBHOOK_URL}} (set on the workers), never "
                "literally in the rule"
            )
        elif "{{" in value:
            problems.append(
                f"args.{name}: {spec.name}'s {name} must not hold a template: trigger data "
                "must never choose where a message goes; use only ${env:NAME}"
            )
    return problems
