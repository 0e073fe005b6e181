"""What the engine gives a CLI agent session (Claude Code, Codex), whichever CLI it is.

`CliSetup` is everything besides the rule: the binary, the worktree, the allow-listed
environment, the limits, the policy with the session's mode, the tools left after mode, palette
and taint, the operator's earlier answers, the engine's protected paths, the provider's settings,
the masker and the event recorder. `Stop` is how the engine ends a session early (a budget, a
call parked for approval, a key the provider refused); `budget_meter` is the model proxy's meter
against the session's limits; `private_home` is the session's own config home; `call_id` names a
call so that an answer meets the same call again in the fresh session a resumed run starts.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from ade_tasks.agents.policy import TAINTED_TOOLS, Decision, Policy
from ade_tasks.agents.protected import ProtectedPaths
from ade_tasks.db.approvals import ToolDecisions
from ade_tasks.json_document import JsonObject
from ade_tasks.secrets import Masker
from ade_tasks.settings import ProviderSettings
from ade_workers.agents.cli.facts import Capability, Support
from ade_workers.agents.http_session import Record, SessionLimits, SessionStatus
from ade_workers.agents.tools.tool import ToolContext
from ade_workers.containment.agent_user import AgentUser
from ade_workers.sandbox.egress import PROXY_VARIABLES
from ade_workers.sandbox.host import SETTING as SANDBOX_SETTING
from ade_workers.sandbox.layout import Forward, Sandbox
from ade_workers.sandbox.scratch import make_directory, scratch_root


@dataclass(frozen=True)
class CliSetup:
    """Everything a CLI session needs from the engine besides the rule."""

    binary: str
    worktree: Path
    env: Mapping[str, str]
    limits: SessionLimits
    policy: Policy  # with the session's permission mode
    tools: list[str]  # the engine tools the mode, palette and taint leave
    tainted: bool
    decisions: ToolDecisions
    protected: ProtectedPaths | None
    provider: ProviderSettings | None
    masker: Masker
    record: Record
    user: AgentUser | None = None  # who the CLI runs as, when not the worker (ADE_AGENT_USER)
    sandbox: Sandbox | None = None  # the session's base sandbox; None: ADE_SANDBOX=off
    completed: Mapping[str, str] = field(default_factory=dict)
    """Calls an earlier, interrupted attempt finished (`call_id` -> the result it recorded)."""
    tool_ctx: ToolContext | None = None
    """What the engine's own tools (`tool_bridge`: github, notify) run with, in the worker."""

    def api_key(self) -> str | None:
        """The provider's key (it stays in the worker's model proxy)."""
        key = self.provider.api_key if self.provider else None
        return key.get_secret_value() if key else None


@dataclass
class Stop:
    """Why the engine ended the session early, if it did; the first reason wins."""

    status: SessionStatus | None = None
    reason: str | None = None
    pending: JsonObject | None = None
    event: threading.Event = field(default_factory=threading.Event)

    def set(self, status: SessionStatus, reason: str, pending: JsonObject | None = None) -> None:
        if self.status is None:
            self.status, self.reason, self.pending = status, reason, pending
        self.event.set()

    def refusal(self) -> str | None:
        """What the model proxy answers once the session is stopping."""
        return self.reason if self.event.is_set() else None


def proxy_capabilities(setup: CliSetup, taint: str) -> list[Capability]:
    """The items every CLI session gets the same way from the engine: budgets and credentials
    (its model proxy) and taint narrowing (`taint` says how this CLI's calls are refused)."""
    E = Support.ENFORCED
    budgeted = setup.limits.max_tokens is not None or setup.limits.max_cost_usd is not None
    return [
        Capability(
            "budget",
            E,
            "metered by the engine's model proxy; the session is stopped once over "
            "(at most one answer past it)",
        )
        if budgeted
        else Capability("budget", E, "none requested"),
        Capability("taint", E, f"{taint} while the prompt holds outsiders' text")
        if setup.tainted
        else Capability("taint", E, "the prompt holds no outsiders' text"),
        Capability(
            "credentials",
            E,
            "the key stays in the worker's model proxy; the CLI has a per-session token"
            + _credentials_floor(setup),
        )
        if setup.sandbox is not None or setup.user is not None
        else Capability(
            "credentials",
            Support.BEST_EFFORT,
            "the key stays in the worker's model proxy, but with no sandbox and no agent user "
            "the CLI's commands run as the worker and can read its environment and files",
        ),
    ]


def _credentials_floor(setup: CliSetup) -> str:
    if setup.sandbox is not None:
        return "; the sandbox hides the worker's processes and files"
    who = setup.user.name if setup.user else "the worker"
    return f"; the CLI runs as {who}, who may not read the worker's environment"


def session_sandbox(
    setup: CliSetup,
    *,
    writable: bool,
    private: tuple[Path, ...],
    read_only: tuple[Path, ...] = (),
    forwards: tuple[Forward, ...] = (),
) -> Sandbox | None:
    """The CLI's sandbox: the base one with the worktree writable (edit) or not (plan), the
    session's private directories read-write, the CLI's install and the engine's helper copies
    read-only, and the model proxy forwarded in."""
    if setup.sandbox is None:
        return None
    install = cli_install(setup.binary, setup.env.get("PATH"))
    base = setup.sandbox
    return replace(
        base,
        writable=writable,
        read_write=(*base.read_write, *private),
        read_only=(*base.read_only, *read_only, *([install] if install else [])),
        forwards=(*base.forwards, *forwards),
    )


def cli_install(binary: str, path: str | None) -> Path | None:
    """The directory of the CLI's install that a sandbox shows read-only: the `node_modules`
    it was installed into by npm (codex's native binary is a package beside its launcher), else
    the nearest directory above the real binary with a package.json, else the binary's."""
    found = shutil.which(binary, path=path)
    if found is None:
        return None
    real = Path(os.path.realpath(found))
    for directory in real.parents:
        if directory.name == "node_modules":
            return directory
    for directory in list(real.parents)[:4]:
        if (directory / "package.json").is_file():
            return directory
    return real.parent


def sandbox_capability(setup: CliSetup, *, writes: str) -> Capability:
    """The sandbox item of a capability report."""
    egress = any(name in setup.env for name in PROXY_VARIABLES)
    if setup.sandbox is None:
        return Capability(
            "sandbox",
            Support.UNSUPPORTED,
            f"off ({SANDBOX_SETTING}=off, set by an admin): the CLI and its commands run "
            "with the worker's view of the host",
        )
    return Capability(
        "sandbox",
        Support.ENFORCED,
        f"bubblewrap: {writes}; the engine's code, virtualenv, data and tokens hidden; a PID "
        "namespace that dies with the session; a network of its own reaching only the "
        "engine's model proxy"
        + (", and the rule's network_hosts through its egress proxy" if egress else ""),
    )


def require_binary(setup: CliSetup) -> None:
    """Raise FileNotFoundError when the CLI's binary is not there: inside a sandbox (or
    behind codex's pipes) a missing binary would only show as the CLI's early exit."""
    if shutil.which(setup.binary, path=setup.env.get("PATH", os.defpath)) is None:
        raise FileNotFoundError(setup.binary)


def real_binary(setup: CliSetup) -> str:
    """The CLI's binary by its real path when sandboxed (PATH inside may not reach it)."""
    if setup.sandbox is None:
        return setup.binary
    found = shutil.which(setup.binary, path=setup.env.get("PATH"))
    return os.path.realpath(found) if found else setup.binary


def engine_data_out_of_reach(setup: CliSetup) -> Capability | None:
    """`engine_data` enforced by the operating system: the session runs as an agent user who
    may read none of the engine's data (None when there is no agent user, or it may)."""
    user, protected = setup.user, setup.protected
    if user is None or protected is None:
        return None
    if any(user.may_read(path) for path, _ in protected.engine_data):
        return None
    return Capability(
        "engine_data",
        Support.ENFORCED,
        f"every process of the session runs as {user.name}, who may not read the engine's "
        "data nor write .git; the engine's own checks refuse file tools on them too",
    )


def budget_meter(limits: SessionLimits, stop: Stop) -> Callable[[int, int], str | None]:
    """The proxy's meter: the running totals against the session's token and cost budgets."""
    spent = [0, 0]

    def meter(input_tokens: int, output_tokens: int) -> str | None:
        spent[0] += input_tokens
        spent[1] += output_tokens
        total = spent[0] + spent[1]
        if limits.max_tokens is not None and total > limits.max_tokens:
            reason = f"spent {total} tokens, over the budget of {limits.max_tokens}"
            stop.set("token_budget", reason)
            return reason
        cost = limits.cost(spent[0], spent[1])
        if limits.max_cost_usd is not None and cost is not None and cost > limits.max_cost_usd:
            reason = f"spent ${cost:.4f}, over the budget of ${limits.max_cost_usd:g}"
            stop.set("cost_budget", reason)
            return reason
        return None

    return meter


def private_home(setup: CliSetup, prefix: str) -> Path:
    """A fresh directory only this session uses (0700, the agent user's when there is one),
    under the provider's `config_home` if set."""
    provider = setup.provider
    base = provider.config_home if provider and provider.config_home else None
    if base is not None:
        base.mkdir(parents=True, exist_ok=True)
    if setup.user is not None:
        parent = os.path.realpath(base or scratch_root())
        setup.user.check_reachable(Path(parent), "the config home")
    home = make_directory(prefix, base)
    if setup.user is not None:
        setup.user.hand_over(home)
    return home


def taint_refusal(tool: str, tainted: bool) -> Decision | None:
    """The refusal of a tainted session's call that is not read-only, or None."""
    if not tainted or tool in TAINTED_TOOLS:
        return None
    return Decision(
        "deny",
        f"{tool} refused: the prompt holds outsiders' text (untrusted_input: narrow), "
        "so this session may only read",
    )


def answered(decisions: ToolDecisions, ident: str, tool: str) -> Decision | None:
    """An operator's earlier answer to the call `ident` (or to every call of `tool`), if any:
    a CLI session that parked on `ask` meets it when the call comes again."""
    if ident in decisions.declined:
        return Decision("deny", f"an operator declined this {tool} call")
    if ident in decisions.approved or tool in decisions.tools_for_session:
        return Decision("allow", f"an operator approved this {tool} call")
    return None


#: The run event that journals a call the engine allowed and the CLI finished, as it finishes
#: (Claude's PostToolUse hook, codex's completed item).
COMPLETED_EVENT = "agent.tool_completed"
#: How much of a finished call's result the journal keeps.
JOURNAL_CHARS = 20_000


def completed_calls(history: Iterable[tuple[str, Mapping[str, object]]]) -> dict[str, str]:
    """The calls the run's journal holds as finished (`agent.tool_completed`, recorded as each
    call ends), by `call_id`, with the result each got."""
    return {
        str(data.get("id")): str(data.get("output", ""))
        for kind, data in history
        if kind == "agent.tool_completed"
    }


#: How much of a recorded result a replayed call gives back to the model.
REPLAY_CHARS = 8_000


def replayed(name: str, result: str) -> Decision:
    """The answer to a call the run's journal holds as finished by an earlier attempt: it does
    not run again; the model gets the result it had (Claude's hook gives it this reason; codex
    declines without one, and the resumed prompt holds the result, `interrupted_note`)."""
    shown = result if len(result) <= REPLAY_CHARS else result[:REPLAY_CHARS] + " [...]"
    return Decision(
        "deny",
        f"not run again: this exact {name} call already ran in an earlier attempt of this "
        f"session (its worker stopped), and the engine recorded its result:\n{shown}\n"
        "Continue from that result.",
    )


def call_id(tool: str, tool_input: Mapping[str, object]) -> str:
    """A stable id for a call: the same tool with the same input gets the same id in any
    session, so an operator's answer meets the call again after the run resumes."""
    canonical = json.dumps([tool, tool_input], sort_keys=True, separators=(",", ":"))
    return "cli-" + hashlib.sha256(canonical.encode()).hexdigest()[:24]
