"""The rule document: when something runs (triggers) and what runs (execution), under which
guardrails. Pydantic validates the whole document at load time so a bad rule never reaches a
worker."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from ade_tasks.json_document import JsonObject
from ade_tasks.rules.agent import ToolPalette
from ade_tasks.rules.agent_defaults import AgentDefaults, with_agent_defaults
from ade_tasks.rules.checks import step_problems
from ade_tasks.rules.concurrency import Concurrency
from ade_tasks.rules.document import QUEUE_NAME, SLUG, Document, admitting
from ade_tasks.rules.guardrails import Guardrails
from ade_tasks.rules.notify import NotifyPolicy
from ade_tasks.rules.outputs import InputSpec, Outputs, Verification, in_declared_order
from ade_tasks.rules.providers.registry import PROVIDERS
from ade_tasks.rules.steps import Execution
from ade_tasks.rules.triggers import RunFinishedTrigger, Trigger

# --- the rule ------------------------------------------------------------------------------

DEFAULT_QUEUES = {"built-in": "ade.builtin", "agent-session": "ade.agent"}


class Rule(Document):
    """One automation rule, exactly as written in a rules file or sent to the API.

    `review_required: true` puts every finished run in the review queue (`pending-review`);
    by default a deterministic run that succeeded with no findings lands in `completed-clean`
    and only agent runs are gated by confidence (`review_profile`, `review_threshold`; see
    `ade_tasks.runs.review`).
    """

    id: str = Field(pattern=SLUG)
    name: str = ""
    description: str = ""
    enabled: bool = True
    project: str = "default"
    triggers: list[Trigger] = Field(min_length=1)
    execution: Execution
    agent: AgentDefaults | None = None  # every agent session's defaults (rules.agent_defaults)
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
    concurrency: Concurrency | None = None
    # Cluster notifications of this rule's events: None follows the routes in settings; a
    # policy narrows routes and events or (`notify: off`) sends none (`rules.notify`).
    notify: NotifyPolicy | None = None

    @model_validator(mode="before")
    @classmethod
    def _inherit_agent_defaults(cls, data: object) -> object:
        return with_agent_defaults(data)

    @field_validator("inputs", mode="before")
    @classmethod
    def _inputs_keep_their_order(cls, value: object) -> object:
        return in_declared_order(value)

    @field_validator("notify", mode="before")
    @classmethod
    def _notify_switch(cls, value: object) -> object:
        # YAML reads `notify: off` as false; `on` (true) is the default, written out.
        if isinstance(value, bool):
            return {"enabled": value}
        return value

    @field_validator("execution", mode="before")
    @classmethod
    def _steps_check_out(cls, value: object, info: ValidationInfo) -> object:
        # At admission `rules.loader.parse_rule` runs these checks beside the structural ones
        # and reports each at its field; a document read back (or built in code) is refused
        # whole, so a stored rule that no longer passes them never dispatches.
        if admitting(info) or not isinstance(value, dict):
            return value
        problems = step_problems({"execution": value})
        if problems:
            raise ValueError("; ".join(f"{f.removeprefix('execution.')}: {r}" for f, r in problems))
        return value

    @model_validator(mode="after")
    def _one_overlap_policy(self) -> Rule:
        if self.concurrency is not None and self.guardrails.overlap is not None:
            raise ValueError(
                "concurrency and guardrails.overlap both say what a new trigger does while a run "
                "is active (per key, per rule); keep one: concurrency.on_new for runs of the "
                "same key, or guardrails.overlap for all runs of the rule"
            )
        return self

    @model_validator(mode="after")
    def _defaults(self) -> Rule:
        if not self.name:
            object.__setattr__(self, "name", self.id)
        if not self.billing_code:
            object.__setattr__(self, "billing_code", f"auto:{self.id}")
        return self

    @model_validator(mode="after")
    def _service_palettes_work(self) -> Rule:
        # A palette that would give the agent nothing is refused, never silently empty.
        for step in self.execution.actions:
            palette = set(getattr(step, "tool_palette", ()))
            if step.type != "agent-session" or not palette & {"github", "notify"}:
                continue
            provider = PROVIDERS.get(getattr(step, "provider", ""))
            if provider is not None and provider.without_engine_tools is not None:
                raise ValueError(
                    f"tool_palette github and notify are engine tools, which provider "
                    f"{provider.name} cannot call yet {provider.without_engine_tools}"
                )
            if "notify" in palette and not self.outputs.notify_url:
                raise ValueError(
                    "tool_palette notify posts to the rule's notify webhook, and "
                    "outputs.notify_url is not set: set it (notify_url: "
                    "${env:SLACK_WEBHOOK_URL}) or remove notify from the palette"
                )
        return self

    @model_validator(mode="after")
    def _not_following_itself(self) -> Rule:
        for index, trigger in enumerate(self.triggers):
            if isinstance(trigger, RunFinishedTrigger) and trigger.follows(self.id):
                raise ValueError(
                    f"triggers.{index}: a run.finished trigger cannot follow its own rule "
                    f"({', '.join(trigger.rule)} matches {self.id!r}): each run would start the "
                    "next one; name the other rules only"
                )
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

    def document(self) -> JsonObject:
        """The rule as JSON-ready data (stored in the database)."""
        return self.model_dump(mode="json", exclude_none=True)
