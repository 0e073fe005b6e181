"""Rules as stored and written: the document, its health, its version history, the writes
that create or replace it and the trust of a shared rules file."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ade_api.http.schemas.actor import By
from ade_api.http.schemas.problem import Problem
from ade_tasks.json_document import JsonObject


class TriggerHealthOut(BaseModel):
    """One trigger's delivery status (`ade_tasks.triggers.health`)."""

    index: int = Field(description="its position in the rule's `triggers`")
    type: str
    ready: bool
    path: str | None = Field(description="what will fire it, e.g. `GitHub webhook`, `beat <id>`")
    error: str | None = Field(description="why nothing can fire it, and what to do")
    paused: bool = Field(
        default=False,
        description="a pause holds it (the rule's or its own): `error` is the pause's note, "
        "who paused it and since when; `path` what fires it once resumed",
    )


class RuleHealthOut(BaseModel):
    """Can the rule fire: ready when no problem of the whole rule stops it (trust, provider,
    project) and every trigger has a path that fires it and no pause holding it. Computed from
    live state on every answer; enabling a rule that is not ready is refused unless forced (a
    pause is no reason to refuse)."""

    ready: bool
    problems: list[str] = Field(description="what stops every trigger of it")
    triggers: list[TriggerHealthOut]


class PauseOut(BaseModel):
    """A pause: the rule, the trigger (null: the whole rule), the note, who and when."""

    rule_id: str
    trigger_index: int | None = Field(
        description="the paused trigger (from 0); null: every automatic trigger of the rule"
    )
    note: str = Field(description="why; every slot or event it skips records it")
    paused_by: str = Field(description="token name (and `by`)")
    paused_at: datetime
    message: str = Field(default="", description="the pause (or resume) in words")


class RuleOut(BaseModel):
    """A rule as stored, with its validated document and its health."""

    model_config = ConfigDict(from_attributes=True)

    id: str
    version: int
    source: str
    source_file: str | None
    content_hash: str
    enabled: bool
    trust_state: str = Field(description="trusted | untrusted (a shared file not yet trusted)")
    source_hash: str | None = Field(description="sha256 of the shared rules file, if shared")
    updated_at: datetime
    document: JsonObject
    health: RuleHealthOut | None = Field(
        default=None, description="can it fire, per trigger (`rules show` prints it)"
    )
    pauses: list[PauseOut] = Field(
        default_factory=list,
        description="what holds it: the whole rule's pause first, then paused triggers; empty "
        "when nothing is paused",
    )


class RuleWrite(BaseModel):
    """A rule to create or replace: its document as JSON, or the YAML text of a rule file (one
    rule), exactly one of the two."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "document": {
                        "id": "nightly-tests",
                        "triggers": [{"type": "schedule", "cron": "0 3 * * *"}],
                        "execution": {
                            "kind": "built-in",
                            "actions": [{"type": "run-command", "command": "make test"}],
                        },
                    }
                },
                {"yaml": "id: hello\ntriggers: [{type: manual}]\nexecution: ..."},
            ]
        },
    )

    document: JsonObject | None = Field(default=None, description="the rule as JSON")
    yaml: str | None = Field(
        default=None, max_length=1_000_000, description="the rule as YAML (a rule file's text)"
    )
    by: By = None

    @model_validator(mode="after")
    def _one_of(self) -> RuleWrite:
        if (self.document is None) == (self.yaml is None):
            raise ValueError("send exactly one of `document` (JSON) or `yaml` (text)")
        return self


class FieldProblem(BaseModel):
    """One wrong field of a rule document."""

    field: str = Field(description="dotted path in the rule document, e.g. `triggers.0.cron`")
    reason: str


class RuleProblems(Problem):
    """An invalid rule document (problem+json with one entry per wrong field)."""

    errors: list[FieldProblem]


class RuleVersionOut(BaseModel):
    """One version of a rule: its document then, and who made it when and how."""

    model_config = ConfigDict(from_attributes=True)

    rule_id: str
    version: int
    change: str = Field(description="created | updated | deleted")
    source: str = Field(description="file | api")
    source_file: str | None
    content_hash: str
    changed_by: str = Field(description="token name (and `by`), or `rules sync` for files")
    changed_at: datetime
    document: JsonObject


class RuleVersionPage(BaseModel):
    """One page of a rule's version history, newest first."""

    items: list[RuleVersionOut]
    next_cursor: str | None = Field(description="pass as `cursor` to get the next page")


class RuleDeleted(BaseModel):
    """A deleted rule: gone from triggers and schedules; its runs and history stay."""

    rule_id: str
    version: int = Field(description="the `deleted` entry of its version history")
    message: str


class TrustRequest(BaseModel):
    """Trust a reviewed shared rules file by its sha256."""

    model_config = ConfigDict(extra="forbid")

    content_hash: str = Field(pattern=r"^[0-9a-f]{64}$")
    by: By = None


class TrustGranted(BaseModel):
    """The rules a trusted shared file released."""

    content_hash: str
    rules: list[str]
