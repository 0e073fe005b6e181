"""The `agent-session` step: build a session from the step and its run, run the tool loop
(`ade_workers.agents.http_session.run_session`, or a CLI agent), and turn its outcome into the
step's outcome.

A rule whose execution is an agent session runs as a chain of this one step (`session`), so
a session and a chain's agent step share lanes, approvals, publishing and the review queue.
Everything the session does is persisted as run events (tagged with the step's id) before the
next model call, so a redelivered or answered run resumes from its transcript. A tool call the
policy answers with `ask` ends the step as `waiting`: the runner parks the run on a pending
input naming the call, and no worker waits for a human.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from contextlib import ExitStack, closing
from dataclasses import replace
from datetime import timedelta

from ade_tasks.agents.policy import Policy, exposed_tools, narrow_for_taint
from ade_tasks.agents.prompt import render_prompt
from ade_tasks.agents.protected import ProtectedPaths
from ade_tasks.agents.threads import as_messages, as_text
from ade_tasks.clock import utcnow
from ade_tasks.db import approvals as approvals_db
from ade_tasks.db import run_events as run_events_db
from ade_tasks.db.engine import SessionFactory
from ade_tasks.db.threads import THREAD_EVENT
from ade_tasks.errors import AdeError
from ade_tasks.guardrails import registry as guardrails
from ade_tasks.guardrails.guardrail import Allowance, Cost
from ade_tasks.json_document import JsonObject
from ade_tasks.rules.agent import AgentSession
from ade_tasks.rules.rule import Rule
from ade_tasks.rules.steps import AgentSessionStep
from ade_tasks.secrets import resolve as resolve_secret
from ade_tasks.settings import Settings
from ade_tasks.states import StepStatus
from ade_tasks.templating import TemplateError
from ade_workers.actions.executor import StepContext, StepOutcome
from ade_workers.actions.run_command import child_env
from ade_workers.agents.cli.cli_session import CLI_DRIVERS, run_cli_session
from ade_workers.agents.cli.setup import COMPLETED_EVENT, CliSetup, completed_calls
from ade_workers.agents.http_session import SessionLimits, SessionOutcome, run_session
from ade_workers.agents.providers.registry import http_provider
from ade_workers.agents.thread_session import close_thread, open_thread, tainted_by
from ade_workers.agents.tools.tool import RunLink, ToolContext
from ade_workers.containment.agent_user import SETTING as AGENT_USER_SETTING
from ade_workers.containment.agent_user import AgentUser, AgentUsers
from ade_workers.sandbox.egress import open_egress
from ade_workers.sandbox.engine import agent_sandbox

log = logging.getLogger(__name__)

DEFAULT_SYSTEM = (
    "You are an automation agent of ADE Tasks working in a git worktree. Use only the tools "
    "you are given; paths are relative to the worktree. When you are done, call `report` once "
    "with a summary and your findings (severity, path, line, message)."
)
#: Approvals of tool calls use step indexes from here on (below are the chain's gates).
TOOL_APPROVAL_BASE = 10_000
#: Events of a rule-level session carry no step id (they were recorded before chains had
#: agent steps); they belong to its one step.
SESSION_STEP = "session"

Record = Callable[[str, JsonObject], None]


def agent_session(action: AgentSessionStep, context: StepContext) -> StepOutcome:
    """Run (or resume) the step's agent session in the step's worktree."""
    sessions, settings, template = context.sessions, context.settings, context.template
    try:
        prompt = render_prompt(action.prompt, template, f"step {action.id!r} prompt")
        limits = _limits(sessions, settings, context.rule, action, context)
        link = run_link(context, action)
        thread = open_thread(sessions, action, context.run_id, context.rule.project, template)
        prompt = tainted_by(prompt, thread)
    except (AdeError, TemplateError) as exc:
        return StepOutcome(StepStatus.FAILED, error=exc.message)
    policy = Policy.from_rule(action.policy, action.permission_mode)
    tools = exposed_tools(list(action.tool_palette), action.permission_mode, policy)
    narrowed = prompt.tainted and action.untrusted_input != "allow"
    if narrowed:
        tools = narrow_for_taint(tools)
    protected = ProtectedPaths.from_settings(settings, context.root)
    with ExitStack() as lease:  # the agent user, if any, is this session's until it ends
        try:
            sandbox = agent_sandbox(settings, context.root, f"agent step {action.id!r}")
            user = _agent_user(settings, context, protected, limits.deadline, lease)
            if sandbox is not None and user is not None:  # helpers run as the user, inside
                sandbox = replace(sandbox, python=user.python())
            proxies: dict[str, str] = {}
            if sandbox is not None and action.network_hosts:
                sandbox, proxies = open_egress(sandbox, action.network_hosts, lease, user)
        except AdeError as exc:
            return StepOutcome(StepStatus.FAILED, error=exc.message)
        except OSError as exc:
            error = f"{AGENT_USER_SETTING}: could not open {context.root} to the agent user: {exc}"
            return StepOutcome(StepStatus.FAILED, error=error)
        env = {
            **child_env(context, action),
            **(user.env(context.root) if user else {}),
            **proxies,
        }
        with sessions() as session:
            history = [
                (kind, data)
                for kind, data in run_events_db.events_of(session, context.run_id, "agent.")
                if data.get("step", SESSION_STEP) == action.id
            ]
            decisions = approvals_db.tool_decisions(session, context.run_id)
        record = _recorder(sessions, context.run_id, action.id)
        if all(kind == THREAD_EVENT for kind, _ in history) and prompt.tainted:
            record("agent.tainted", {"reasons": list(prompt.reasons), "tools_narrowed": narrowed})
        tool_ctx = ToolContext(
            worktree=context.root,
            protected=protected,
            env=env,
            masker=context.masker,
            kill_grace=context.kill_grace,
            should_stop=context.should_stop,
            should_stop_now=context.should_stop_now,
            time_left=lambda: limits.deadline - time.monotonic(),
            user=user,
            sandbox=sandbox,
            run=link,
        )
        driver = CLI_DRIVERS.get(action.provider)
        if driver is not None:
            configured = settings.provider(action.provider)
            setup = CliSetup(
                binary=(configured.binary if configured else None) or driver.facts.binary,
                worktree=tool_ctx.worktree,
                env=tool_ctx.env,
                limits=limits,
                policy=policy,
                tools=tools,
                tainted=narrowed,
                decisions=decisions,
                protected=protected,
                provider=configured,
                masker=tool_ctx.masker,
                record=record,
                user=user,
                sandbox=sandbox,
                completed=completed_calls(history),
                tool_ctx=tool_ctx,
            )
            earlier = as_text(thread.continuation) if thread else ""
            outcome = _cli_session(action, setup, earlier + prompt.text, history, tool_ctx)
        else:
            # One HTTP client per session; closing it releases its connections.
            with closing(http_provider(action.provider, settings)) as provider:
                outcome = run_session(
                    provider,
                    model=action.model,
                    max_tokens_per_turn=action.max_tokens_per_turn,
                    system=_system(action, tools),
                    prompt=prompt.text,
                    tools=tools,
                    policy=policy,
                    tool_ctx=tool_ctx,
                    limits=limits,
                    history=history,
                    record=record,
                    decisions=decisions,
                    earlier=as_messages(thread.continuation) if thread else [],
                )
        close_thread(
            sessions,
            thread,
            run_id=context.run_id,
            step_id=action.id,
            rule_id=context.rule.id,
            prompt=prompt,
            status=outcome.status,
            summary=outcome.summary or outcome.error or "",
        )
        _charge(sessions, context.rule, outcome, history, limits)
        return _step_outcome(outcome, action, prompt.reasons if narrowed else ())


def run_link(context: StepContext, action: AgentSession) -> RunLink | None:
    """What the session's github and notify tools act for (None without those palettes): the
    run, the trigger's pull request, the lane, the cluster's GitHub, the rule's webhook."""
    if not {"github", "notify"} & set(action.tool_palette):
        return None
    trigger, outputs = context.trigger, context.rule.outputs
    repo = outputs.repo or trigger.get("repo")
    number = trigger.get("number")
    notify_url = None
    if "notify" in action.tool_palette and outputs.notify_url:
        where = f"rule {context.rule.id!r} notify_url"
        notify_url, _ = resolve_secret(outputs.notify_url, context.base_env, where)
    lane = context.lane
    return RunLink(
        run_id=context.run_id,
        github=context.settings.github,
        repo=repo if isinstance(repo, str) else None,
        number=number if isinstance(number, int) and not isinstance(number, bool) else None,
        lane_branch=lane.branch if lane else None,
        lane_base=lane.base_ref if lane else None,
        notify_url=notify_url,
    )


def _agent_user(
    settings: Settings,
    context: StepContext,
    protected: ProtectedPaths,
    deadline: float,
    lease: ExitStack,
) -> AgentUser | None:
    """The agent user this session runs as (leased in `lease`), with the worktree opened to
    it; None when agents run as the worker."""
    users = AgentUsers.from_settings(settings)
    if users is None:
        return None
    user = lease.enter_context(users.lease(deadline, context.should_stop))
    user.open_worktree(context.root, protected)
    return user


def park_for_tool(
    session_factory: SessionFactory, run_id: str, worker: str, pending: JsonObject
) -> bool:
    """Park the run on a pending input for the tool call; False if the run was not ours."""
    if pending.get("kind") == "question":
        reason = (
            f"{pending['reason']}; answer it with "
            "`ade-tasks inputs answer <id> accept --note 'your answer'` (or decline|cancel)"
        )
    else:
        reason = (
            f"the agent wants to call {pending['tool']} ({pending.get('reason', 'policy: ask')}); "
            "answer it with `ade-tasks inputs answer <id> accept|accept_for_session|decline|cancel`"
        )
    timeout = pending.get("timeout_min")
    call = approvals_db.ToolCall(
        call_id=str(pending["tool_call_id"]),
        tool=str(pending["tool"]),
        arguments=dict(pending.get("arguments") or {}),
        expires_at=utcnow() + timedelta(minutes=timeout) if timeout else None,
    )
    with session_factory.begin() as session:
        count = len(approvals_db.approvals_of(session, run_id))
        return approvals_db.wait_for_approval(
            session, run_id, worker, TOOL_APPROVAL_BASE + count, reason, call
        )


def _cli_session(
    action: AgentSessionStep,
    setup: CliSetup,
    prompt: str,
    history: list[tuple[str, JsonObject]],
    tool_ctx: ToolContext,
) -> SessionOutcome:
    """A headless CLI agent session. A resumed run starts the CLI afresh (its transcript lived
    in the session's private config home); the prompt then names the calls an earlier attempt
    was allowed to make whose outcome is unknown, so the model checks before repeating them."""
    ran = run_cli_session(
        action,
        setup,
        prompt=prompt + interrupted_note(history),
        system=action.system,
        deadline=setup.limits.deadline,
        should_stop=tool_ctx.should_stop,
        kill_grace=tool_ctx.kill_grace,
    )
    outcome = ran.outcome
    limits = setup.limits
    if limits.price is None and ran.cost_usd is not None:  # only the CLI knows the price
        return replace(outcome, cost_usd=ran.cost_usd)
    return replace(outcome, cost_usd=limits.cost(outcome.input_tokens, outcome.output_tokens))


def interrupted_note(history: list[tuple[str, JsonObject]]) -> str:
    """What the model is told about calls an earlier, interrupted attempt was allowed to make
    (the decisions recorded after the last finished CLI process; none if it finished): those
    it finished, with their recorded results (a repeat is not run again), and those whose end
    is unknown."""
    unknown: list[str] = []
    done: list[str] = []
    finished = completed_calls(history)  # these are answered from the journal instead
    # Codex records its decisions under its own item ids, which the journal keeps as `cli_id`.
    finished |= {
        str(data["cli_id"]): str(data.get("output", ""))
        for kind, data in history
        if kind == COMPLETED_EVENT and data.get("cli_id")
    }
    for kind, data in history:
        if kind == "agent.cli_result":
            unknown, done = [], []
        elif kind == "agent.tool_decision" and data.get("verdict") == "allow":
            call = f"- {data.get('tool')} {json.dumps(data.get('input', {}))[:500]}"
            result = finished.get(str(data.get("id")))
            if result is None:
                unknown.append(call)
            else:
                done.append(f"{call}\n  result: {result[:NOTE_RESULT_CHARS]}")
    note = ""
    if done:
        note += (
            "\nThese calls finished; the engine recorded their results and will not run "
            "them again (a repeat is declined):\n" + "\n".join(done[-20:])
        )
    if unknown:
        note += (
            "\nIt was allowed to make these tool calls; whether each ran, and how far, is "
            "unknown:\n" + "\n".join(unknown[-20:]) + "\nCheck the current state before "
            "repeating any of them."
        )
    if not note:
        return ""
    interrupted = "an earlier attempt of this session was interrupted when its worker stopped."
    return f"\n\nNote: {interrupted}{note}"


#: How much of each finished call's recorded result the resumed prompt shows.
NOTE_RESULT_CHARS = 2_000


def _recorder(session_factory: SessionFactory, run_id: str, step_id: str) -> Record:
    def record(kind: str, data: JsonObject) -> None:
        with session_factory.begin() as session:
            run_events_db.append_event(session, run_id, kind, {**data, "step": step_id})

    return record


def _system(action: AgentSession, tools: list[str]) -> str:
    described = f"Tools available in this session: {', '.join(tools) or 'none'}."
    if action.system and action.system_mode == "replace":
        return f"{action.system}\n\n{described}"
    extra = f"\n\n{action.system}" if action.system else ""
    return f"{DEFAULT_SYSTEM}{extra}\n\n{described}"


def _limits(
    sessions: SessionFactory,
    settings: Settings,
    rule: Rule,
    action: AgentSessionStep,
    context: StepContext,
) -> SessionLimits:
    """The session's own limits, tightened by what the guardrails allow (the rule's daily
    token and dollar budgets' remainder)."""
    with sessions() as session:  # opens a connection only if a guardrail reads one
        allowed = guardrails.allowance(
            session, rule, Allowance(action.max_tokens, action.max_cost_usd)
        )
    max_tokens, max_cost = allowed.tokens, allowed.cost_usd
    price = settings.model_prices.get(action.model)
    if max_cost is not None and price is None:
        raise AdeError(
            f"rule {rule.id!r} has a cost budget, but model {action.model!r} has no price; add "
            f'it to ADE_MODEL_PRICES, e.g. {{"{action.model}": {{"input_usd_per_mtok": 3, '
            '"output_usd_per_mtok": 15}}'
        )
    return SessionLimits(
        max_turns=action.max_turns,
        max_tokens=max_tokens,
        deadline=time.monotonic() + min(context.time_left(), action.timeout_sec),
        max_cost_usd=max_cost,
        price=price,
    )


def _charge(
    sessions: SessionFactory,
    rule: Rule,
    outcome: SessionOutcome,
    history: list[tuple[str, JsonObject]],
    limits: SessionLimits,
) -> None:
    """Charge what this attempt spent (not what earlier attempts did) through the guardrails
    (the budget adds it to the billing code's usage)."""
    earlier_in = earlier_out = 0
    for kind, data in history:
        if kind == "agent.model_turn":
            earlier_in += int(data.get("usage", {}).get("input_tokens", 0))
            earlier_out += int(data.get("usage", {}).get("output_tokens", 0))
    spent_in = outcome.input_tokens - earlier_in
    spent_out = outcome.output_tokens - earlier_out
    if spent_in + spent_out <= 0:
        return
    cost = (outcome.cost_usd or 0.0) - (limits.cost(earlier_in, earlier_out) or 0.0)
    with sessions.begin() as session:
        guardrails.charge(session, rule, Cost(spent_in + spent_out, max(0.0, cost)))


STEP_STATUS = {
    "completed": StepStatus.SUCCEEDED,
    "timed_out": StepStatus.TIMED_OUT,
    "waiting": StepStatus.WAITING,
}


def _step_outcome(
    outcome: SessionOutcome, action: AgentSessionStep, narrowed: tuple[str, ...]
) -> StepOutcome:
    result: JsonObject = {
        "session_status": outcome.status,
        "turns": outcome.turns,
        "input_tokens": outcome.input_tokens,
        "output_tokens": outcome.output_tokens,
        "cost_usd": outcome.cost_usd,
        "findings": outcome.findings,
        "confidence": outcome.confidence,
        "narrowed_by_untrusted_input": list(narrowed),
    }
    if outcome.pending is not None:
        result["pending"] = {**outcome.pending, "timeout_min": action.approval_timeout_min}
    status = STEP_STATUS.get(outcome.status, StepStatus.FAILED)
    error = None if status is StepStatus.SUCCEEDED else (outcome.error or outcome.status)
    return StepOutcome(status, output=outcome.summary, result=result, error=error)
