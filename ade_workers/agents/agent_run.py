"""A claimed run of an `agent-session` rule: build the session from the rule and its trigger,
run the tool loop (`session.run_session`), and turn its outcome into the run's result.

Everything the session does is persisted as run events before the next model call, so a
redelivered or approved run resumes from its transcript. A tool call the policy answers with
`ask` parks the run in `waiting` with an approval naming the call: no worker waits for a human.
Approving re-queues the run and the call runs; declining re-queues it and the agent is told.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ade_tasks.agents.policy import READ_ONLY_TOOLS, Policy, exposed_tools
from ade_tasks.agents.prompt import render_prompt
from ade_tasks.db import approvals as approvals_db
from ade_tasks.db import runs as runs_db
from ade_tasks.db import usage as usage_db
from ade_tasks.db.engine import SessionFactory
from ade_tasks.db.schema import RunStatus, StepStatus, utcnow
from ade_tasks.rules.models import AgentExecution, Rule
from ade_tasks.secrets import Masker
from ade_tasks.settings import Settings
from ade_workers.actions import StepOutcome
from ade_workers.agents.providers.anthropic import AnthropicProvider
from ade_workers.agents.providers.openai import OpenAIProvider
from ade_workers.agents.session import SessionLimits, SessionOutcome, run_session
from ade_workers.agents.tools import ToolContext

log = logging.getLogger(__name__)

HTTP_PROVIDERS = ("openai", "anthropic")
DEFAULT_BASE_URLS = {
    "openai": "https://api.openai.com/v1",
    "anthropic": "https://api.anthropic.com",
}
DEFAULT_SYSTEM = (
    "You are an automation agent of ADE Tasks working in a git worktree. Use only the tools "
    "you are given; paths are relative to the worktree. When you are done, call `report` once "
    "with a summary and your findings (severity, path, line, message)."
)
#: Approvals of tool calls use step indexes from here on (below are the chain's gates).
TOOL_APPROVAL_BASE = 10_000


@dataclass(frozen=True)
class AgentResult:
    """What the runner records for a finished (or parked) session."""

    status: RunStatus | None  # None: parked in `waiting`
    error: str | None
    step: StepOutcome
    findings: list[dict[str, Any]]
    turns: int
    pending: dict[str, Any] | None = None  # the tool call a parked session waits on


def provider_for(
    execution: AgentExecution, settings: Settings
) -> OpenAIProvider | AnthropicProvider:
    """The HTTP provider a rule names, with the endpoint and key from settings."""
    configured = settings.providers.get(execution.provider)
    base_url = (configured.base_url if configured else None) or DEFAULT_BASE_URLS[
        execution.provider
    ]
    key = configured.api_key.get_secret_value() if configured and configured.api_key else None
    if execution.provider == "anthropic":
        return AnthropicProvider(base_url=base_url, api_key=key)
    return OpenAIProvider(base_url=base_url, api_key=key)


def run_agent(
    session_factory: SessionFactory,
    settings: Settings,
    *,
    run_id: str,
    rule: Rule,
    worktree: Path,
    env: dict[str, str],
    deadline: float,
    should_stop: Callable[[], bool],
    template_context: Any,
) -> AgentResult:
    """Run (or resume) the rule's agent session for this run."""
    execution = rule.execution
    assert isinstance(execution, AgentExecution)
    policy = Policy.from_rule(execution.policy)
    tools = exposed_tools(list(execution.tool_palette), execution.permission_mode, policy)
    prompt = render_prompt(execution.prompt, template_context, f"rule {rule.id!r} prompt")
    narrowed = prompt.tainted and execution.untrusted_input != "allow"
    if narrowed:
        tools = [t for t in tools if t in READ_ONLY_TOOLS or t == "report"]
    with session_factory() as session:
        history = runs_db.events_of(session, run_id, "agent.")
        approved, declined = approvals_db.tool_decisions(session, run_id)
    record = _recorder(session_factory, run_id)
    if not history and prompt.tainted:
        record("agent.tainted", {"reasons": list(prompt.reasons), "tools_narrowed": narrowed})
    limits = SessionLimits(
        max_turns=execution.max_turns,
        max_tokens=_tokens_left(session_factory, rule),
        deadline=deadline,
    )
    tool_ctx = ToolContext(
        worktree=worktree,
        env=env,
        masker=Masker.none(),
        kill_grace=settings.kill_grace_seconds,
        should_stop=should_stop,
        time_left=lambda: deadline - time.monotonic(),
    )
    # One HTTP client per session; closing it releases its connections.
    with closing(provider_for(execution, settings)) as provider:
        outcome = run_session(
            provider,
            model=execution.model,
            max_tokens_per_turn=execution.max_tokens_per_turn,
            system=_system(execution, tools),
            prompt=prompt.text,
            tools=tools,
            policy=policy,
            tool_ctx=tool_ctx,
            limits=limits,
            history=history,
            record=record,
            approved=approved,
            declined=declined,
        )
    _charge(session_factory, rule, outcome, history)
    return _result(outcome, prompt.reasons if narrowed else ())


def park_for_tool(
    session_factory: SessionFactory, run_id: str, worker: str, pending: dict[str, Any]
) -> bool:
    """Park the run until an operator decides on the pending tool call."""
    reason = (
        f"the agent wants to call {pending['tool']} ({pending.get('reason', 'policy: ask')}); "
        f"approve or reject it with `ade-tasks runs approve|reject {run_id}`"
    )
    with session_factory.begin() as session:
        count = len(approvals_db.approvals_of(session, run_id))
        return approvals_db.wait_for_approval(
            session,
            run_id,
            worker,
            TOOL_APPROVAL_BASE + count,
            reason,
            tool_call_id=str(pending["tool_call_id"]),
        )


def _recorder(
    session_factory: SessionFactory, run_id: str
) -> Callable[[str, dict[str, Any]], None]:
    def record(kind: str, data: dict[str, Any]) -> None:
        with session_factory.begin() as session:
            runs_db.append_event(session, run_id, kind, data)

    return record


def _system(execution: AgentExecution, tools: list[str]) -> str:
    described = f"Tools available in this session: {', '.join(tools) or 'none'}."
    if execution.system and execution.system_mode == "replace":
        return f"{execution.system}\n\n{described}"
    extra = f"\n\n{execution.system}" if execution.system else ""
    return f"{DEFAULT_SYSTEM}{extra}\n\n{described}"


def _tokens_left(session_factory: SessionFactory, rule: Rule) -> int | None:
    cap = rule.guardrails.budget.tokens_per_day
    if cap is None:
        return None
    with session_factory() as session:
        used = usage_db.usage_on(session, usage_db.day_of(utcnow()), rule.billing_code).tokens
    return max(0, cap - used)


def _charge(
    session_factory: SessionFactory,
    rule: Rule,
    outcome: SessionOutcome,
    history: list[tuple[str, dict[str, Any]]],
) -> None:
    """Charge the tokens this attempt spent to the rule's billing code."""
    earlier = sum(
        int(data.get("usage", {}).get("input_tokens", 0))
        + int(data.get("usage", {}).get("output_tokens", 0))
        for kind, data in history
        if kind == "agent.model_turn"
    )
    spent = outcome.input_tokens + outcome.output_tokens - earlier
    if spent > 0:
        with session_factory.begin() as session:
            usage_db.add_usage(session, rule.billing_code, usage_db.day_of(utcnow()), tokens=spent)


def _result(outcome: SessionOutcome, narrowed: tuple[str, ...]) -> AgentResult:
    result = {
        "turns": outcome.turns,
        "input_tokens": outcome.input_tokens,
        "output_tokens": outcome.output_tokens,
        "findings": outcome.findings,
        "confidence": outcome.confidence,
        "narrowed_by_untrusted_input": list(narrowed),
    }
    status_of = {
        "completed": RunStatus.SUCCEEDED,
        "timed_out": RunStatus.TIMED_OUT,
        "waiting": None,
    }
    status = status_of.get(outcome.status, RunStatus.FAILED)
    error = None if outcome.status == "completed" else (outcome.error or outcome.status)
    step_status = {
        RunStatus.SUCCEEDED: StepStatus.SUCCEEDED,
        RunStatus.TIMED_OUT: StepStatus.TIMED_OUT,
    }.get(status or RunStatus.FAILED, StepStatus.FAILED)
    if outcome.status == "waiting":
        step_status = StepStatus.RUNNING
    step = StepOutcome(step_status, output=outcome.summary, result=result, error=error)
    return AgentResult(status, error, step, outcome.findings, outcome.turns, outcome.pending)
