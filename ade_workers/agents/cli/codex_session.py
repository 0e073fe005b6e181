"""One Codex session bounded by the engine (`codex_app_server` speaks the protocol).

- **Decisions.** Codex asks its client before every command and every file change it is not
  allowed to make unasked (`codex_app_server` says which); `CodexJudge` answers with the engine's
  policy: a command is a `bash` call (no path: judged by tool rules, the mode and taint), a file
  change an `edit_file` call on the paths it touches. `ask` stops the session and parks the run.
- **Sandbox.** `plan` runs codex's read-only sandbox (no command or change writes anything);
  `edit` and `full-auto` its workspace-write sandbox, where changes inside the worktree are
  applied without asking. What that cannot enforce is refused before a session starts: at
  validation (a policy that would deny or ask for in-worktree writes, see
  `ade_tasks.rules.agent`), or here when the worktree holds the engine's own data.
- **Credentials and budgets** as for Claude Code: codex talks to the engine's model proxy with a
  per-session token; the proxy holds the key, meters the Responses stream and stops the session
  once it is over budget. CODEX_HOME and HOME are private to the session and removed after it.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from ade_tasks.agents.policy import WRITE_TOOLS, Decision, decide
from ade_tasks.agents.protected import DATA_DIR_NAME
from ade_tasks.rules.agent import AgentSession
from ade_tasks.rules.tool_names import matching_pattern
from ade_workers.agents.cli.codex_app_server import CodexOutcome, run_codex_session
from ade_workers.agents.cli.codex_home import Sandbox
from ade_workers.agents.cli.codex_requests import CodexRequest, request_call
from ade_workers.agents.cli.facts import Capability, CapabilityReport, Support
from ade_workers.agents.cli.model_proxy import ModelProxy
from ade_workers.agents.cli.setup import (
    CliSetup,
    Stop,
    answered,
    budget_meter,
    call_id,
    engine_data_out_of_reach,
    private_home,
    proxy_capabilities,
    replayed,
    require_binary,
    sandbox_capability,
    session_sandbox,
    taint_refusal,
)
from ade_workers.sandbox.layout import Sandbox as OsSandbox

DEFAULT_BASE_URL = "https://api.openai.com/v1"
KEY_SETTING = "ADE_PROVIDERS__CODEX__API_KEY"
#: What a command or change may carry that asks for more than the session's sandbox: network
#: access, another writable root. Such a request is declined, whatever the policy says.
ESCALATIONS = ("networkApprovalContext", "grantRoot", "additionalPermissions")
#: What of a worktree codex would load as its own instructions and skills.
REPOSITORY_SKILLS = (".codex", ".agents/skills")
log = logging.getLogger(__name__)


@dataclass
class CodexJudge:
    """Decides each approval codex asks for (the caller records the decision)."""

    setup: CliSetup
    stop: Stop
    completed: dict[str, str] = field(init=False)
    """Calls an interrupted attempt finished: the first repeat of each is declined, not run
    again (the model was told their results in its prompt, `interrupted_note`)."""

    def __post_init__(self) -> None:
        self.completed = dict(self.setup.completed)

    def __call__(self, request: CodexRequest) -> Decision:
        try:
            return self._decide(request)
        except Exception as exc:  # a bug in the engine refuses the call, never lets it pass
            log.exception("deciding a codex request failed")
            return Decision("deny", f"the engine failed to decide this call ({exc})")

    def _decide(self, request: CodexRequest) -> Decision:
        tool, tool_input = request_call(request)
        if self.stop.event.is_set():
            return Decision(
                "deny", f"the session is stopping ({self.stop.reason}); do nothing else"
            )
        escalation = [key for key in ESCALATIONS if request.params.get(key)]
        if escalation:
            return Decision(
                "deny",
                f"codex asked for more than its sandbox ({', '.join(escalation)}); the engine "
                "never grants that",
            )
        ident = call_id(tool, tool_input)
        if ident in self.completed:
            return replayed(tool, self.completed.pop(ident))
        if tool == "bash" and "bash" not in self.setup.tools:
            return self._read_only_command()
        if tool == "edit_file" and not WRITE_TOOLS & set(self.setup.tools):
            return Decision("deny", "this session's tools do not write files (mode and palette)")
        tainted = taint_refusal(tool, self.setup.tainted)
        if tainted is not None:
            return tainted
        decision = decide(
            self.setup.policy,
            tool,
            paths=list(request.paths),
            writes=request.kind == "file_change",
            worktree=self.setup.worktree,
            protected=self.setup.protected,
        )
        if decision.verdict != "ask":
            return decision
        earlier = answered(self.setup.decisions, ident, tool)
        if earlier is not None:
            return earlier
        pending = {
            "tool_call_id": ident,
            "tool": tool,
            "arguments": self.setup.masker.mask_value(tool_input),
            "reason": decision.reason,
        }
        self.stop.set("waiting", decision.reason, pending)
        return decision

    def _read_only_command(self) -> Decision:
        """A command in a session whose tools do not include bash (plan, taint): in the
        engine's read-only sandbox it can change nothing and reach no network, so it runs,
        unless the policy denies bash by name; without the sandbox it is refused."""
        if self.setup.sandbox is None:
            return Decision("deny", "bash is not among this session's tools (mode and palette)")
        if matching_pattern("bash", self.setup.policy.denied_tools) is not None:
            return Decision("deny", "bash is among the rule's denied_tools")
        return Decision("allow", "runs in the engine's read-only sandbox (no writes, no network)")


def sandbox_for(setup: CliSetup, execution: AgentSession) -> Sandbox:
    """Read-only unless the session may write: its mode, its palette and taint all allow it
    (under workspace-write codex applies changes inside the worktree without asking)."""
    writes = execution.permission_mode != "plan" and not setup.tainted
    return "workspace-write" if writes and WRITE_TOOLS & set(setup.tools) else "read-only"


def unenforceable(setup: CliSetup, execution: AgentSession) -> str | None:
    """Why this session cannot run bounded (checked before it starts), or None."""
    if sandbox_for(setup, execution) == "read-only" or setup.sandbox is not None:
        return None  # the engine's sandbox hides its data from codex and every command
    found = engine_data_in(setup)
    if found is None:
        return None
    return (
        f"codex applies file changes inside its workspace without asking, and {setup.worktree} "
        f"holds the engine's own data ({found}): run this rule in a lane (its own worktree), or "
        "in permission_mode: plan"
    )


def engine_data_in(setup: CliSetup) -> str | None:
    """The engine's data inside the worktree, if any: a configured file or directory, or a
    `.ade` directory anywhere below it (git internals are skipped: codex cannot write them)."""
    root = os.path.realpath(setup.worktree)
    for path, what in setup.protected.engine_data if setup.protected else ():
        if os.path.commonpath([root, path]) == root:
            return what
    for directory, subdirs, _ in os.walk(root):
        if DATA_DIR_NAME in subdirs:
            return os.path.relpath(os.path.join(directory, DATA_DIR_NAME), root) + "/"
        subdirs[:] = [d for d in subdirs if d != ".git"]
    return None


@dataclass(frozen=True)
class CodexRun:
    """A finished codex session and what the engine did to it."""

    outcome: CodexOutcome
    stop: Stop
    spend_input: int
    spend_output: int


def run_codex(
    execution: AgentSession,
    setup: CliSetup,
    *,
    prompt: str,
    deadline: float,
    should_stop: Callable[[], bool],
    kill_grace: float,
) -> CodexRun:
    """Run one codex session behind the engine's model proxy, in a private CODEX_HOME.
    Raises FileNotFoundError when the binary is not there (the app-server's pipes would only
    say "broken pipe")."""
    require_binary(setup)
    stop = Stop()
    home = private_home(setup, "ade-codex-")
    key = setup.api_key()
    upstream = (setup.provider.base_url if setup.provider else None) or DEFAULT_BASE_URL
    try:
        with ModelProxy(
            upstream=upstream,
            api_key=key,
            style="openai",
            meter=budget_meter(setup.limits, stop),
            stopped=stop.refusal,
            masker=setup.masker,
            on_refused=lambda reason: stop.set("failed", f"{reason}: check {KEY_SETTING}"),
        ) as proxy:
            masker = setup.masker.with_values([proxy.token, *([key] if key else [])])
            outcome = run_codex_session(
                binary=setup.binary,
                worktree=setup.worktree,
                codex_home=home,
                env={**setup.env, **(setup.provider.env if setup.provider else {})},
                model=execution.model,
                prompt=prompt,
                base_url=proxy.url,
                api_key=proxy.token,
                sandbox=sandbox_for(setup, execution),
                decide=CodexJudge(setup, stop),
                record=lambda kind, data: setup.record(kind, masker.mask_value(data)),
                should_stop=lambda: stop.event.is_set() or should_stop(),
                deadline=deadline,
                over_budget=lambda _in, _out: None,  # the proxy meters every answer
                kill_grace=kill_grace,
                user=setup.user,
                outer=_without_repository_skills(
                    session_sandbox(
                        setup,
                        writable=sandbox_for(setup, execution) == "workspace-write",
                        private=(),
                    )
                ),
            )
            spend = proxy.spend
            return CodexRun(outcome, stop, spend.input_tokens, spend.output_tokens)
    finally:
        shutil.rmtree(home, ignore_errors=True)


def _without_repository_skills(sandbox: OsSandbox | None) -> OsSandbox | None:
    """The sandbox with the worktree's codex configuration and skills hidden: codex reads a
    repository's skills (`.codex/`, `.agents/skills/`) into the model's context whatever its
    config says, and they are the checked-out tree's, not the rule's."""
    if sandbox is None:
        return None
    found = [sandbox.worktree / name for name in REPOSITORY_SKILLS]
    return replace(sandbox, hidden=(*sandbox.hidden, *(p for p in found if p.is_dir())))


def capabilities(setup: CliSetup, execution: AgentSession) -> CapabilityReport:
    """What the engine enforces on a codex session and how (codex 0.169, app-server)."""
    E, B, U = Support.ENFORCED, Support.BEST_EFFORT, Support.UNSUPPORTED
    sandbox = sandbox_for(setup, execution)
    asks = (
        "codex asks the engine before each command it knows to name (an execpolicy rule for "
        "every program); one it does not (e.g. through the dynamic loader) runs inside the "
        "engine's sandbox"
        if setup.sandbox is not None
        else "codex asks the engine before each command (an execpolicy rule for every program)"
    )
    changes = (
        "every file change asks the engine (read-only sandbox)"
        if sandbox == "read-only"
        else "changes outside the worktree ask the engine; inside it they are applied unasked, "
        "so only policies that allow them are admitted"
    )
    items = [
        Capability(
            "permission_mode", E, f"{execution.permission_mode}: --sandbox {sandbox}; {asks}"
        ),
        Capability("denied_tools", B if setup.sandbox is not None else E, f"{asks}; {changes}"),
        Capability("allowed_tools", E, f"{asks}; {changes}"),
        Capability("fallback", E, f"{asks}; ask parks the run as a pending input"),
        Capability(
            "sandbox_root",
            E if sandbox == "read-only" else B,
            changes
            if setup.policy.sandbox_root is None
            else f"{changes}; writes by commands stay in the worktree (bubblewrap)",
        ),
        Capability("reads", E, "the engine's sandbox shows commands only the worktree and "
                   "system directories, never the engine's data")
        if setup.sandbox is not None
        else Capability("reads", U, "codex's sandbox does not confine what commands read"),
        sandbox_capability(
            setup,
            writes="the worktree read-only"
            if sandbox == "read-only"
            else "writes only in the worktree, .git read-only",
        ),
        Capability(
            "engine_data",
            E,
            "hidden by the engine's sandbox from codex and every command, wherever it lies"
            + (f"; every process of the session runs as {setup.user.name}" if setup.user else ""),
        )
        if setup.sandbox is not None
        else engine_data_out_of_reach(setup)
        or Capability(
            "engine_data",
            B,
            "file changes to it are refused; a writing session never starts in a worktree "
            "holding it; commands can read it (masked toward the model and in records)",
        ),
        Capability("max_turns", U, "codex has no turn limit; timeout_sec and budgets bound it"),
        *proxy_capabilities(setup, "the read-only sandbox, and every command refused"),
        Capability(
            "settings",
            E,
            "private CODEX_HOME and HOME; no project .codex/, AGENTS.md, MCP servers or hooks",
        ),
    ]
    return CapabilityReport(cli="codex", items=tuple(items))
