"""What came in: deliveries to custom hooks, ingress events, and local git or file events."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from ade_tasks.json_document import JsonObject


class HookDeliveryOut(BaseModel):
    """One delivery to a custom hook, as its delivery log keeps it."""

    model_config = ConfigDict(from_attributes=True)

    id: int
    hook_id: str
    received_at: datetime
    status_code: int
    outcome: str
    delivery_id: str | None
    event_id: int | None
    headers: JsonObject = Field(description="credentials and signatures redacted")
    body: str = Field(description="the first 64 KiB")
    rejected: bool = Field(
        False, description="refused before it passed authentication (logged on its own ring)"
    )


class MatchVerdictOut(BaseModel):
    """What became of one rule with a trigger of the event's type (`triggers.verdicts`)."""

    rule: str
    verdict: str = Field(
        description="matched | skipped | refused | paused | disabled | untrusted | kill-switch "
        "| not-admitted"
    )
    trigger: int | None = Field(None, description="the trigger's index in the rule (from 0)")
    filter: str | None = Field(None, description="refused: the trigger field that said no")
    reason: str | None = Field(None, description="why, naming the value the filter saw")
    run: str | None = Field(None, description="matched or skipped: the run it recorded")
    event: str | None = Field(
        None, description="a further event this one stood for (lane.merged), if not this one"
    )


class MatchingOut(BaseModel):
    """What matching made of an event: each candidate rule's verdict, or that it is held."""

    rules: list[MatchVerdictOut] = Field(
        default_factory=list, description="at most 50: the rules that passed their filters first"
    )
    counts: dict[str, int] = Field(default_factory=dict, description="every verdict's total")
    left_out: int = Field(0, description="verdicts counted but not kept")
    note: str | None = Field(None, description="why no rule was a candidate")
    held: str | None = Field(None, description="the kill switch holds the event: why")
    held_at: datetime | None = None


class IngressEventOut(BaseModel):
    """A received delivery or event and what came of it."""

    model_config = ConfigDict(from_attributes=True)

    id: int
    source: str
    delivery_id: str | None
    event_key: str
    trigger_type: str | None
    summary: str
    status: str = Field(description="received | dispatched | failed")
    runs: list[str] | None
    error: str | None
    received_at: datetime
    processed_at: datetime | None
    matching: MatchingOut | None = Field(
        None, description="each candidate rule's verdict; null before matching"
    )
    payload: JsonObject


class IngressPage(BaseModel):
    """One page of ingress events, newest first."""

    items: list[IngressEventOut]
    next_before: int | None = Field(description="pass as `before` for the next page")


class LocalEvent(BaseModel):
    """A git or file event emitted on a developer's or a git server's machine."""

    model_config = ConfigDict(extra="forbid")

    type: str = Field(description="git.commit | git.push | file.changed")
    repo: str | None = None
    branch: str | None = None
    title: str | None = None
    body: str | None = None
    author: str | None = None
    head_sha: str | None = None
    paths: list[str] = Field(default_factory=list, max_length=10_000)
    summary: str | None = None
    delivery_id: str | None = Field(default=None, max_length=255)
    fields: dict[str, str] = Field(default_factory=dict, description="extra {{trigger.fields.*}}")


class LocalEventAccepted(BaseModel):
    """A local event was stored (or was a duplicate of an earlier one)."""

    event_id: int | None
    duplicate: bool
    delivery_id: str
