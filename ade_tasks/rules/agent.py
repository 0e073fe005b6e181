"""What an agent session is: its provider, model, prompt, tool policy and limits (an agent
step of a chain and an agent rule share it)."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import (
    Field,
    GetJsonSchemaHandler,
    PlainValidator,
    SerializerFunctionWrapHandler,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)
from pydantic_core import CoreSchema, PydanticCustomError

from ade_tasks.json_document import JsonObject
from ade_tasks.rules.document import MAX_TOKENS, MAX_USD, Document, admitting, at_most
from ade_tasks.rules.providers.registry import PROVIDERS, provider_names


class ToolPolicy(Document):
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

    @model_serializer(mode="wrap")
    def _unstated_fallback_stays_unstated(
        self, handler: SerializerFunctionWrapHandler
    ) -> JsonObject:
        # Whether the rule stated a fallback decides what runs without an allowed_tools entry
        # (edit's worktree writes, the github and notify palettes: `Policy.from_rule`), so the
        # stored rule a worker reads back must not state the default the author left out.
        data: JsonObject = handler(self)
        if "fallback" not in self.model_fields_set:
            data.pop("fallback", None)
        return data


ToolPalette = Literal["repo", "git", "tests", "github", "notify"]


#: A DNS name or IPv4 address: labels of letters, digits and hyphens, separated by dots.
_LABEL = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
HOST_NAME = re.compile(rf"(?i){_LABEL}(?:\.{_LABEL})*")


def _registered(value: object) -> str:
    # Read at each validation, so a provider registered later (a test's toy) is known; the
    # error is the one a Literal of the names gives.
    if isinstance(value, str) and value in PROVIDERS:
        return value
    raise PydanticCustomError(
        "literal_error", "Input should be {expected}", {"expected": provider_names()}
    )


class _Listed:
    """A provider name's JSON schema: the names registered when the schema is made."""

    def __get_pydantic_json_schema__(
        self, _schema: CoreSchema, _handler: GetJsonSchemaHandler
    ) -> JsonObject:
        return {"enum": list(PROVIDERS), "type": "string"}


#: The name of a registered agent provider (`ade_tasks.rules.providers.registry`).
ProviderName = Annotated[str, PlainValidator(_registered), _Listed()]


class AgentSession(Document):
    """What an agent session is, wherever it runs: a whole rule or one step of a chain.

    The session works in its lane's worktree (or the project root; `plan` mode is read-only).
    `max_tokens` and `max_cost_usd` bound one session (the rule's daily budget bounds all its
    sessions of a day); cost comes from the per-model price table in settings.
    `approval_timeout_min` declines a tool call nobody answered in time (default: wait).
    """

    provider: ProviderName
    model: str
    prompt: str = Field(min_length=1)
    system: str | None = None
    system_mode: Literal["append", "replace"] = "append"
    permission_mode: Literal["plan", "edit", "full-auto"] = "plan"
    tool_palette: list[ToolPalette] = Field(default_factory=lambda: list[ToolPalette](["repo"]))
    policy: ToolPolicy = Field(default_factory=ToolPolicy)
    max_turns: int = Field(default=30, ge=1, le=500)
    max_tokens_per_turn: int = Field(default=4096, ge=256, le=200_000)
    max_tokens: Annotated[int | None, at_most(MAX_TOKENS)] = Field(default=None, gt=0)
    max_cost_usd: Annotated[float | None, at_most(MAX_USD)] = Field(default=None, gt=0)
    approval_timeout_min: float | None = Field(default=None, gt=0, le=60 * 24 * 30)
    # `narrow`: a prompt that interpolates outsiders' text leaves the agent read-only + report.
    untrusted_input: Literal["narrow", "allow"] = "narrow"
    # Hosts (`name` or `name:port`) the session's processes may reach through the engine's
    # egress proxy; none by default: the sandbox's network holds only the model proxy.
    network_hosts: list[str] = Field(default_factory=list, max_length=100)
    # A durable thread (`ade_tasks.agents.threads`): sessions whose key renders the same in one
    # project continue one conversation, e.g. "pr-{{trigger.repo}}#{{trigger.number}}".
    thread: str | None = Field(default=None, min_length=1, max_length=500)

    @field_validator("network_hosts")
    @classmethod
    def _host_names(cls, hosts: list[str]) -> list[str]:
        for host in hosts:
            name, colon, port = host.partition(":")
            if not HOST_NAME.fullmatch(name) or (
                colon and not (port.isdigit() and 1 <= int(port) <= 65535)
            ):
                raise ValueError(
                    f"network_hosts entry {host!r} is not a host name or name:port; write e.g. "
                    "pypi.org or api.github.com:443"
                )
        return hosts

    @model_validator(mode="after")
    def _enforceable(self, info: ValidationInfo) -> AgentSession:
        if admitting(info):
            problem = PROVIDERS[self.provider].refusal(self)
            if problem is not None:
                raise ValueError(problem)
        return self
