"""A rule's agent defaults: the `agent:` block every agent session of the rule inherits (each
`agent-session` step of a chain, and an `agent-session` execution), so a chain of agent steps
states its provider, model, mode and policy once.

How a session's own settings and the rule's combine (`with_agent_defaults`):

- every field the session states wins; a field it leaves out comes from `agent:` (lists such as
  `tool_palette` and `network_hosts` included: the session's list replaces the rule's);
- `policy` merges field by field: `allowed_tools` and `denied_tools` are the union of both (the
  session's allow list extends the rule's, and denials accumulate, so a step can never lift a
  rule-level denial); `fallback` and `sandbox_root` are the session's when it states them;
- `prompt` is never a default: each session says what it is for.

The merge happens on the raw document before the sessions are validated, so they are checked
(the codex capability check included) with what they will run with. It is idempotent: a stored
rule, whose sessions hold the merged values, reads back the same. A wrong value in `agent:` is
reported there (`agent.model`), not at each session that would have inherited it.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError, field_validator, model_validator

from ade_tasks.json_document import JsonObject
from ade_tasks.rules.agent import AgentSession, ProviderName
from ade_tasks.rules.providers.registry import PROVIDERS

#: Policy lists that merge as a union (the rule's entries first) instead of being replaced.
UNION_POLICY_FIELDS = ("allowed_tools", "denied_tools")
#: What a session gets for a required field whose default is wrong: the rule is refused at
#: `agent.<field>` anyway, and this keeps each session from also reporting the field missing.
_STAND_INS = {"provider": next(iter(PROVIDERS)), "model": "(the rule's agent.model)"}


class AgentDefaults(AgentSession):
    """The `agent:` block of a rule: any field of an agent session but `prompt`, all optional."""

    provider: ProviderName | None = None  # type: ignore[assignment]
    model: str | None = None  # type: ignore[assignment]
    prompt: str | None = None  # type: ignore[assignment]

    @field_validator("prompt")
    @classmethod
    def _no_prompt(cls, value: str | None) -> str | None:
        if value is not None:
            raise ValueError(
                "a prompt is not a default: each agent step (or the agent-session execution) "
                "states its own; move it there"
            )
        return value

    @model_validator(mode="after")
    def _enforceable(self) -> AgentDefaults:
        return self  # the sessions, with these merged in, are checked instead


def with_agent_defaults(document: object) -> object:
    """The rule document with its `agent:` defaults merged into each agent session (a copy;
    the document itself when there is nothing to merge)."""
    if not isinstance(document, Mapping):
        return document
    defaults = document.get("agent")
    execution = document.get("execution")
    if not isinstance(defaults, Mapping) or not defaults or not isinstance(execution, Mapping):
        return document
    usable = _usable(defaults)
    merged = dict(document)
    if execution.get("kind") == "agent-session":
        merged["execution"] = merge_session(execution, usable)
        return merged
    actions = execution.get("actions")
    if isinstance(actions, list):
        merged["execution"] = {
            **execution,
            "actions": [
                merge_session(step, usable)
                if isinstance(step, Mapping) and step.get("type") == "agent-session"
                else step
                for step in actions
            ],
        }
    return merged


def merge_session(session: Mapping[str, Any], defaults: Mapping[str, Any]) -> JsonObject:
    """One session's settings over the rule's defaults (see the module's docstring)."""
    merged = dict(session)
    for name, value in defaults.items():
        own = merged.get(name)
        if name == "policy" and isinstance(value, Mapping) and isinstance(own, Mapping):
            merged[name] = _merge_policy(value, own)
        elif name not in merged:
            merged[name] = copy.deepcopy(value)
    return merged


def _merge_policy(rule: Mapping[str, Any], step: Mapping[str, Any]) -> JsonObject:
    policy = {**copy.deepcopy(dict(rule)), **step}
    for name in UNION_POLICY_FIELDS:
        ours, theirs = rule.get(name), step.get(name)
        if isinstance(ours, list) and isinstance(theirs, list):
            policy[name] = list(dict.fromkeys([*ours, *theirs]))
    return policy


def _usable(defaults: Mapping[str, Any]) -> JsonObject:
    """The defaults worth merging: the valid ones, a stand-in for a wrong required one, and
    nothing for another wrong one (the rule's `agent` field reports each)."""
    try:
        AgentDefaults.model_validate(dict(defaults))
    except ValidationError as exc:
        wrong = {str(error["loc"][0]) for error in exc.errors() if error["loc"]}
    else:
        wrong = set()
    usable = {name: value for name, value in defaults.items() if name not in wrong}
    usable.update({name: _STAND_INS[name] for name in wrong & _STAND_INS.keys()})
    usable.pop("prompt", None)
    return usable
