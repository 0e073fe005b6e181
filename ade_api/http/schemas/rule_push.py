"""A pushed rules directory (`POST /api/v1/rules/push`): its files in, the change out."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from ade_api.http.schemas.actor import By
from ade_api.http.schemas.problem import Problem

#: The most files one push may hold.
MAX_PUSHED_FILES = 10_000


class PushedFileIn(BaseModel):
    """One rules file: its path under the pushed directory and its text."""

    model_config = ConfigDict(extra="forbid")

    path: str = Field(max_length=1024, description="`/`-separated, e.g. `team/nightly.yaml`")
    text: str = Field(description="the file's YAML text (at most 1 MiB, as a rules file)")


class RulesPush(BaseModel):
    """A rules directory to make the file rules match, or to compare with them (`dry_run`)."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "directory": "config/rules",
                    "files": [
                        {
                            "path": "hello.yaml",
                            "text": "id: hello\ntriggers: [{type: manual}]\nexecution: ...",
                        }
                    ],
                    "dry_run": True,
                }
            ]
        },
    )

    directory: str = Field(
        default="",
        max_length=512,
        pattern=r"^[^\x00-\x1f]*$",
        description="the directory's name as the pusher knows it (e.g. `config/rules`); the "
        "rules' file names start with it",
    )
    files: list[PushedFileIn] = Field(max_length=MAX_PUSHED_FILES)
    dry_run: bool = Field(default=False, description="compare only; change nothing")
    base: str | None = Field(
        default=None,
        pattern=r"^[0-9a-f]{16}$",
        description="the file rules' revision this push was compared with (a dry run's "
        "`base`); refused with 409 when they changed since",
    )
    by: By = None


class PushProblemOut(BaseModel):
    """One problem of one pushed file."""

    file: str
    field: str = Field(description="dotted path in the rule, or `(file)`, `(document)`")
    reason: str


class PushProblems(Problem):
    """A pushed directory with problems: nothing was applied; `errors` lists every one."""

    errors: list[PushProblemOut]


class PushOut(BaseModel):
    """What a push changed (`applied`), or would change (a dry run)."""

    applied: bool
    base: str = Field(description="the file rules' revision before the push")
    revision: str = Field(description="their revision after it (a dry run: `base`)")
    added: list[str]
    updated: list[str]
    removed: list[str] = Field(description="file rules the directory no longer holds")
    unchanged: list[str]
    diffs: dict[str, str] = Field(
        description="per updated rule, a unified diff of its document as YAML"
    )
