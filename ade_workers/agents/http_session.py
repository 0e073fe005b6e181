"""The agent session: the tool loop between a model provider and the engine's tools.

Each model turn is recorded before its tools run, and each tool result before the next model
call, so a session can be rebuilt from its recorded events and continued after a crash or an
operator's approval: recorded model turns are never asked again and recorded tool results never
run again. A call that can change something is recorded as started (`agent.tool_started`) just
before it runs; if its worker dies before its result is recorded, the resumed session never runs
it again blindly: it records a result saying the call was interrupted and its outcome is unknown,
and the model goes on from there. (A read-only call, or `todo`/`report`, simply runs again.)
The engine's policy (`decide`), not the model, decides which calls run; a call the policy wants
an operator to approve ends the session as "waiting" and frees the worker.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from ade_tasks.agents.policy import (
    ALWAYS_TOOLS,
    GITHUB_READ_TOOLS,
    READ_ONLY_TOOLS,
    WRITE_TOOLS,
    Policy,
    decide,
)
from ade_tasks.db.approvals import ToolDecisions
from ade_tasks.db.schema import QUESTION_TOOL
from ade_tasks.json_document import JsonObject
from ade_tasks.settings import ModelPrice
from ade_workers.agents.providers import (
    Message,
    ModelProvider,
    ToolSpec,
)
from ade_workers.agents.tools import github
from ade_workers.agents.tools.registry import TOOL_SPECS, run_tool
from ade_workers.agents.tools.tool import Finding, Report, ToolContext, ToolResult
from ade_workers.integrations.http import IntegrationError, IntegrationUnavailableError

TOOL_RESULT_CAP = 20_000
"""Characters of one tool result the model sees and the transcript keeps."""

SessionStatus = Literal[
    "completed", "max_turns", "token_budget", "cost_budget", "timed_out", "failed", "waiting"
]
Record = Callable[[str, JsonObject], None]
DECLINED = "declined by an operator"
INTERRUPTED = (
    "{tool} was interrupted when its worker stopped: it started, but its outcome is unknown "
    "(it may have done part or all of its work, or none). Check the current state before "
    "calling it again."
)
STARTED_EVENT = "agent.tool_started"
#: Calls that change nothing: after a crash they run again instead of being reported unknown.
REPEATABLE_TOOLS = READ_ONLY_TOOLS | ALWAYS_TOOLS | GITHUB_READ_TOOLS
NO_DECISIONS = ToolDecisions(frozenset(), frozenset(), frozenset())
#: ask_user's sliding window: a session may ask this many questions per window.
QUESTIONS_PER_WINDOW = 3
QUESTION_WINDOW_SEC = 600.0


@dataclass(frozen=True)
class SessionLimits:
    """What one session may spend: model calls, tokens, dollars and wall-clock time."""

    max_turns: int
    max_tokens: int | None
    deadline: float
    max_cost_usd: float | None = None
    price: ModelPrice | None = None  # needed to count cost

    def cost(self, input_tokens: int, output_tokens: int) -> float | None:
        """What this many tokens cost (None: the model has no price)."""
        return None if self.price is None else self.price.cost(input_tokens, output_tokens)


@dataclass(frozen=True)
class SessionOutcome:
    """How a session ended, what it reported, and what it cost."""

    status: SessionStatus
    summary: str
    findings: list[Finding]
    confidence: float | None
    input_tokens: int
    output_tokens: int
    turns: int
    error: str | None
    pending: JsonObject | None
    cost_usd: float | None = None


@dataclass
class _State:
    """The conversation so far and what it cost, rebuilt from recorded events."""

    messages: list[Message]
    turns: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    last_text: str = ""
    last_calls: list[JsonObject] | None = None  # None until the first model turn
    done: set[str] = field(default_factory=set)
    asked: set[str] = field(default_factory=set)
    started: set[str] = field(default_factory=set)
    questions: list[float] = field(default_factory=list)  # when the session asked (time.time)
    report: Report | None = None


def run_session(
    provider: ModelProvider,
    *,
    model: str,
    max_tokens_per_turn: int,
    system: str,
    prompt: str,
    tools: list[str],
    policy: Policy,
    tool_ctx: ToolContext,
    limits: SessionLimits,
    history: list[tuple[str, JsonObject]],
    record: Record,
    decisions: ToolDecisions = NO_DECISIONS,
    earlier: list[Message] | None = None,
) -> SessionOutcome:
    """Run, or continue from `history`, the tool loop until the model finishes or a limit hits.
    `earlier`: messages before the prompt (a thread's earlier sessions, `agents.threads`)."""
    state = _replay(system, prompt, history, earlier or [])
    if tool_ctx.report is None:
        tool_ctx.report = state.report
    specs: list[ToolSpec] = [
        {
            "name": name,
            "description": TOOL_SPECS[name]["description"],
            "parameters": TOOL_SPECS[name]["parameters"],
        }
        for name in tools
    ]
    stop_now = tool_ctx.should_stop_now or tool_ctx.should_stop
    while True:
        # Cancelled or superseded: the turns so far stay recorded. Asked of the database, not
        # the monitor's last look, so a turn that arrived after the cancel runs no tool.
        if stop_now():
            return _outcome(state, limits, tool_ctx, "failed", "stopped: the run was cancelled")
        # Calls of the latest turn without a recorded result: new ones, or left by a crash or
        # an approval wait.
        for call in state.last_calls or []:
            if call["id"] in state.done:
                continue
            pending = _settle(call, state, tools, policy, tool_ctx, record, decisions)
            if pending is not None:
                return _outcome(state, limits, tool_ctx, "waiting", pending["reason"], pending)
        if tool_ctx.report is not None or state.last_calls == []:
            return _outcome(state, limits, tool_ctx, "completed", None)
        stop = _over_budget(state, limits)
        if stop is not None:
            return _outcome(state, limits, tool_ctx, *stop)
        try:
            turn = provider.complete(
                state.messages,
                specs,
                model=model,
                max_tokens=max_tokens_per_turn,
                deadline=limits.deadline,
            )
        except (IntegrationError, IntegrationUnavailableError) as exc:
            if time.monotonic() >= limits.deadline:
                why = f"the session's deadline passed during a model call: {exc.message}"
                return _outcome(state, limits, tool_ctx, "timed_out", why)
            return _outcome(state, limits, tool_ctx, "failed", exc.message)
        data: JsonObject = {
            "text": turn.text,
            "tool_calls": [
                _call_data(c.id, c.name, c.arguments, c.arguments_error) for c in turn.tool_calls
            ],
            "usage": {
                "input_tokens": turn.usage.input_tokens,
                "output_tokens": turn.usage.output_tokens,
            },
            "stop_reason": turn.stop_reason,
        }
        # A model may echo a secret the prompt held; the transcript keeps only the mask.
        data = tool_ctx.masker.mask_value(data)
        record("agent.model_turn", data)
        _add_turn(state, data)


def _call_data(
    call_id: str, name: str, arguments: JsonObject, arguments_error: str | None
) -> JsonObject:
    data: JsonObject = {"id": call_id, "name": name, "arguments": arguments}
    if arguments_error is not None:
        data["arguments_error"] = arguments_error
    return data


def _replay(
    system: str, prompt: str, history: list[tuple[str, JsonObject]], earlier: list[Message]
) -> _State:
    """The conversation and its cost as earlier attempts recorded them."""
    state = _State(
        messages=[
            {"role": "system", "content": system},
            *earlier,
            {"role": "user", "content": prompt},
        ]
    )
    for kind, data in history:
        if kind == "agent.model_turn":
            _add_turn(state, data)
        elif kind == "agent.tool_result":
            _add_result(state, data)
        elif kind == "agent.approval_request":
            state.asked.add(data["tool_call_id"])
            if data.get("kind") == "question":
                state.questions.append(float(data.get("asked_at") or 0.0))
        elif kind == STARTED_EVENT:
            state.started.add(data["tool_call_id"])
        # agent.refused is a note for people; its refusal was also recorded as a tool result.
    return state


def _add_turn(state: _State, data: JsonObject) -> None:
    usage = data.get("usage") or {}
    state.turns += 1
    state.input_tokens += int(usage.get("input_tokens") or 0)
    state.output_tokens += int(usage.get("output_tokens") or 0)
    state.last_text = data.get("text") or ""
    calls = [dict(call) for call in data.get("tool_calls") or []]
    state.last_calls = calls
    # Results and approval requests that follow belong to this turn's calls.
    state.done = set()
    state.asked = set()
    state.started = set()
    message: Message = {"role": "assistant", "content": state.last_text}
    if calls:
        message["tool_calls"] = [
            {"id": c["id"], "name": c["name"], "arguments": c["arguments"]} for c in calls
        ]
    state.messages.append(message)


def _add_result(state: _State, data: JsonObject) -> None:
    state.done.add(data["tool_call_id"])
    if data.get("report") is not None:
        state.report = data["report"]
    state.messages.append(
        {
            "role": "tool",
            "tool_call_id": data["tool_call_id"],
            "name": data["tool"],
            "content": data["content"],
            "is_error": bool(data["is_error"]),
        }
    )


def _settle(
    call: JsonObject,
    state: _State,
    tools: list[str],
    policy: Policy,
    ctx: ToolContext,
    record: Record,
    decisions: ToolDecisions,
) -> JsonObject | None:
    """Run or refuse one call and record its result; the approval request when one is needed."""
    call_id, name, arguments = call["id"], call["name"], call["arguments"]
    # It ran, or began to, in an attempt that died; a GitHub write finds its own earlier
    # effect by its marker (run and call id), so it runs again instead.
    if call_id in state.started and name not in github.RESUMABLE_TOOLS:
        _finish(call, state, record, ToolResult(False, INTERRUPTED.format(tool=name)), True)
        return None
    if name not in tools:
        reason = f"tool {name} is not available in this session"
        record("agent.refused", {"tool_call_id": call_id, "tool": name, "reason": reason})
        result = ToolResult(False, reason)
    elif call.get("arguments_error"):
        result = ToolResult(False, f"{name}: {call['arguments_error']}")
    elif name == QUESTION_TOOL:
        asked = _question(call, state, policy, ctx, record, decisions)
        if isinstance(asked, dict):
            return asked
        result = asked
    else:
        decision = decide(
            policy,
            name,
            paths=call_paths(name, arguments),
            writes=name in WRITE_TOOLS,
            worktree=ctx.worktree,
            protected=ctx.protected,
        )
        if decision.verdict == "deny":
            reason = f"refused: {decision.reason}"
            record("agent.refused", {"tool_call_id": call_id, "tool": name, "reason": reason})
            result = ToolResult(False, reason)
        elif decision.verdict == "ask" and call_id in decisions.declined:
            result = ToolResult(False, f"{name} was {DECLINED}; do not call it again this way")
        elif (
            decision.verdict == "ask"
            and call_id not in decisions.approved
            and name not in decisions.tools_for_session
        ):
            pending = {
                "tool_call_id": call_id,
                "tool": name,
                "arguments": arguments,
                "reason": decision.reason,
            }
            if call_id not in state.asked:
                record("agent.approval_request", pending)
                state.asked.add(call_id)
            return pending
        else:
            if name not in REPEATABLE_TOOLS:
                record(STARTED_EVENT, {"tool_call_id": call_id, "tool": name})
                state.started.add(call_id)
            result = run_tool(name, arguments, ctx, call_id)
    _finish(call, state, record, result)
    return None


def _question(
    call: JsonObject,
    state: _State,
    policy: Policy,
    ctx: ToolContext,
    record: Record,
    decisions: ToolDecisions,
) -> ToolResult | JsonObject:
    """`ask_user`: the operator's answer once there is one; otherwise the pending input that
    parks the run, unless the session asked too often lately (then "retry after N s")."""
    call_id, question = call["id"], str(call["arguments"].get("question", "")).strip()
    decision = decide(policy, QUESTION_TOOL, worktree=ctx.worktree, protected=ctx.protected)
    if decision.verdict == "deny":
        record(
            "agent.refused",
            {"tool_call_id": call_id, "tool": QUESTION_TOOL, "reason": decision.reason},
        )
        return ToolResult(False, f"refused: {decision.reason}")
    if call_id in decisions.answers:
        return ToolResult(True, f"The operator answered: {decisions.answers[call_id]}")
    if call_id in decisions.declined:
        return ToolResult(False, "The operator declined to answer; go on without it or report.")
    if not question:
        return ToolResult(False, "ask_user needs a question")
    now = time.time()
    if call_id not in state.asked:
        wait = question_wait(state.questions, now)
        if wait > 0:
            return ToolResult(
                False,
                f"ask_user is limited to {QUESTIONS_PER_WINDOW} questions per "
                f"{QUESTION_WINDOW_SEC:g} s in a session: retry after {math.ceil(wait)} s, "
                "or go on without an answer",
            )
    pending = {
        "tool_call_id": call_id,
        "tool": QUESTION_TOOL,
        "arguments": {"question": question},
        "reason": f"the agent asks: {question[:500]}",
        "kind": "question",
        "asked_at": now,
    }
    if call_id not in state.asked:
        record("agent.approval_request", pending)
        state.asked.add(call_id)
        state.questions.append(now)
    return pending


def question_wait(asked_at: list[float], now: float) -> float:
    """Seconds until the session may ask again: the sliding window of its last questions."""
    recent = sorted(t for t in asked_at if t > now - QUESTION_WINDOW_SEC)
    if len(recent) < QUESTIONS_PER_WINDOW:
        return 0.0
    return recent[-QUESTIONS_PER_WINDOW] + QUESTION_WINDOW_SEC - now


def _finish(
    call: JsonObject,
    state: _State,
    record: Record,
    result: ToolResult,
    interrupted: bool = False,
) -> None:
    """Record a call's result and add it to the conversation."""
    call_id, name = call["id"], call["name"]
    content = result.content
    if len(content) > TOOL_RESULT_CAP:
        cut = len(content) - TOOL_RESULT_CAP
        content = content[:TOOL_RESULT_CAP] + f"\n[... {cut} more characters cut; ask for less]"
    data: JsonObject = {
        "tool_call_id": call_id,
        "tool": name,
        "ok": result.ok,
        "content": content,
        "is_error": not result.ok,
    }
    if interrupted:
        data["interrupted"] = True
    if name == "report" and result.ok:
        # Kept so a resumed session knows it already reported without running the tool again.
        data["report"] = dict(result.data)
    record("agent.tool_result", data)
    _add_result(state, data)


#: The argument naming the path each engine tool acts on, and its default.
PATH_ARGUMENTS: dict[str, tuple[str, str | None]] = {
    "read_file": ("path", None),
    "list_dir": ("path", "."),
    "grep": ("path", "."),
    "glob": ("", "."),  # a glob searches the whole worktree
    "write_file": ("path", None),
    "edit_file": ("path", None),
}


def call_paths(name: str, arguments: JsonObject) -> tuple[str, ...]:
    """The paths an engine tool call names, as given, for `decide` (none for bash, todo,
    report: a command is judged by the tool rules, never by a working directory)."""
    if name not in PATH_ARGUMENTS:
        return ()
    key, default = PATH_ARGUMENTS[name]
    value = arguments.get(key, default) if key else default
    return (value,) if isinstance(value, str) else ()


def _over_budget(state: _State, limits: SessionLimits) -> tuple[SessionStatus, str] | None:
    if state.turns >= limits.max_turns:
        return (
            "max_turns",
            f"stopped after {state.turns} model turns (max_turns {limits.max_turns})",
        )
    spent = state.input_tokens + state.output_tokens
    if limits.max_tokens is not None and spent > limits.max_tokens:
        return "token_budget", f"spent {spent} tokens, over the budget of {limits.max_tokens}"
    cost = limits.cost(state.input_tokens, state.output_tokens)
    if limits.max_cost_usd is not None and cost is not None and cost > limits.max_cost_usd:
        return (
            "cost_budget",
            f"spent ${cost:.4f}, over the budget of ${limits.max_cost_usd:g}",
        )
    if time.monotonic() >= limits.deadline:
        return "timed_out", f"the session's deadline passed after {state.turns} model turns"
    return None


def _outcome(
    state: _State,
    limits: SessionLimits,
    ctx: ToolContext,
    status: SessionStatus,
    error: str | None,
    pending: JsonObject | None = None,
) -> SessionOutcome:
    report = ctx.report if status == "completed" else None
    return SessionOutcome(
        status=status,
        summary=report["summary"] if report else state.last_text,
        findings=list(report["findings"]) if report else [],
        confidence=report.get("confidence") if report else None,
        input_tokens=state.input_tokens,
        output_tokens=state.output_tokens,
        turns=state.turns,
        error=error,
        pending=pending,
        cost_usd=limits.cost(state.input_tokens, state.output_tokens),
    )
