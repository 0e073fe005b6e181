"""One headless Claude Code session, bounded by the engine.

What the engine sets up around `claude -p`, and why:

- **Decisions.** The session's settings (`--settings`, the only settings it loads:
  `--setting-sources ""`) hold one PreToolUse hook, `claude_hook.py`, that sends every tool
  call to this worker's decision socket; `CallJudge` answers with the engine's policy. Behind
  it, Claude's own permission mode is `plan` or `default`, never a bypass, so the
  `full-auto` mode also works for a worker running as root (`--dangerously-skip-permissions`
  refuses root) and a hook that cannot run at all still leaves headless Claude refusing writes
  and commands (reads inside its working directory would pass). `--tools` offers only the
  Claude tools of the engine tools the mode and palette allow.
- **Nothing of the worktree's or the worker user's configuration.** No project, local or user
  settings (so no hooks of the checked-out tree), `--strict-mcp-config` with no MCP servers but
  the engine's own, and a private HOME and `CLAUDE_CONFIG_DIR` per session, removed afterwards.
- **The engine's tools.** A session whose palette brings engine-run tools (`github`, `notify`)
  gets one MCP server, `ade`: the engine's `mcp_bridge.py` inside the sandbox, passing each
  call to the worker's `ToolBridge`, which runs only a call the hook allowed (`tool_bridge.py`).
- **Credentials.** The CLI talks to the engine's model proxy (`model_proxy.py`) with a
  per-session token; the provider's key (`ADE_PROVIDERS__CLAUDE_CODE__API_KEY`) and endpoint
  (`..._BASE_URL`) stay in the worker, so no `Bash` call of the model can read them.
- **Budgets.** The proxy meters every answer; past `max_tokens` or `max_cost_usd` it refuses
  further calls and the session is stopped (its process tree killed), ending with the budget
  status and its transcript kept. `--max-turns` bounds turns; `--max-budget-usd` is passed too.
- **Ask.** A call the policy answers with `ask` stops the session; the step ends `waiting`
  with the call pending, so the run parks as a pending input and no worker waits. After the
  answer the session starts afresh (Claude keeps its transcript in the private config home,
  which is gone), and the repeated call meets the answer (`setup.call_id`).
- **Processes.** Claude, its hooks and its tools run in one container (`run_process`):
  nothing survives the session or the worker.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ade_tasks.json_document import JsonObject
from ade_tasks.rules.agent import AgentSession
from ade_workers.agents.cli import claude_hook, mcp_bridge
from ade_workers.agents.cli.claude_calls import CallJudge, claude_tools_for
from ade_workers.agents.cli.decision_server import DecisionServer
from ade_workers.agents.cli.facts import Capability, CapabilityReport, Support
from ade_workers.agents.cli.model_proxy import ModelProxy
from ade_workers.agents.cli.setup import (
    CliSetup,
    Stop,
    budget_meter,
    engine_data_out_of_reach,
    private_home,
    proxy_capabilities,
    real_binary,
    require_binary,
    sandbox_capability,
    session_sandbox,
)
from ade_workers.agents.cli.tool_bridge import SERVER, ToolBridge, bridged, mcp_name
from ade_workers.containment.process import ProcessResult, run_process
from ade_workers.sandbox import helpers
from ade_workers.sandbox.bridge import UnixBridge
from ade_workers.sandbox.layout import Forward
from ade_workers.sandbox.scratch import make_directory

DEFAULT_BASE_URL = "https://api.anthropic.com"
KEY_SETTING = "ADE_PROVIDERS__CLAUDE_CODE__API_KEY"
#: Claude Code's own timeout for the hook; the decision socket answers in milliseconds.
HOOK_TIMEOUT_SEC = 30
#: Variables that keep the CLI from calling home (updates, telemetry) on a closed network.
QUIET_ENV = {
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
}


#: The hook's bytes as this worker started with them (never the source tree's later state).
HOOK_PROGRAM = helpers.register(claude_hook.__file__)
#: Likewise the MCP server that serves the engine's tools inside the sandbox.
BRIDGE_PROGRAM = helpers.register(mcp_bridge.__file__)


@dataclass(frozen=True)
class Hook:
    """How Claude runs the engine's hook: the Python, the script (the engine's read-only,
    hash-checked copy) and the decision socket."""

    socket_path: Path
    python: str = sys.executable
    script: str = ""

    def __post_init__(self) -> None:
        if not self.script:
            object.__setattr__(self, "script", str(HOOK_PROGRAM.installed()))


def session_settings(hook: Hook) -> JsonObject:
    """The only settings the session loads: the engine's hook before and after every tool."""
    command = " ".join(
        json.dumps(part) for part in (hook.python, "-I", "-S", hook.script, str(hook.socket_path))
    )
    entry = {"type": "command", "command": command, "timeout": HOOK_TIMEOUT_SEC}
    every_tool = [{"matcher": "*", "hooks": [entry]}]
    return {"hooks": {"PreToolUse": every_tool, "PostToolUse": every_tool}}


def mcp_config(hook: Hook, bridge_socket: Path) -> JsonObject:
    """The session's one MCP server: the engine's bridge, run by the hook's Python from the
    engine's copy, talking to the worker's bridge socket."""
    server = {
        "type": "stdio",
        "command": hook.python,
        "args": ["-I", "-S", str(BRIDGE_PROGRAM.installed()), str(bridge_socket)],
    }
    return {"mcpServers": {SERVER: server}}


def claude_argv(
    execution: AgentSession,
    setup: CliSetup,
    *,
    prompt: str,
    system: str | None,
    hook: Hook,
    bridge_socket: Path | None = None,
) -> list[str]:
    """The `claude -p` command line of one engine-bounded session (with the engine's MCP
    server when `bridge_socket` is given)."""
    argv = [
        real_binary(setup),
        "-p",
        "--output-format",
        "stream-json",
        "--verbose",
        "--model",
        execution.model,
        "--max-turns",
        str(execution.max_turns),
        "--permission-mode",
        "plan" if execution.permission_mode == "plan" else "default",
        "--setting-sources",
        "",
        "--strict-mcp-config",
        "--settings",
        json.dumps(session_settings(hook)),
        "--tools",
        ",".join(claude_tools_for(setup.tools, setup.policy)),
    ]
    if bridge_socket is not None:
        argv += ["--mcp-config", json.dumps(mcp_config(hook, bridge_socket))]
    if setup.limits.max_cost_usd is not None:
        argv += ["--max-budget-usd", f"{setup.limits.max_cost_usd:g}"]
    if system is not None:
        flag = "--system-prompt" if execution.system_mode == "replace" else "--append-system-prompt"
        argv += [flag, system]
    return [*argv, "--", prompt]


def session_env(setup: CliSetup, proxy: ModelProxy, home: Path) -> dict[str, str]:
    """The CLI's environment: the allow-listed one, the provider's extra settings, the proxy,
    and a private home; never the provider's key."""
    extra = setup.provider.env if setup.provider else {}
    return {
        **setup.env,
        **extra,
        **QUIET_ENV,
        "HOME": str(home),
        "CLAUDE_CONFIG_DIR": str(home / ".claude"),
        "ANTHROPIC_BASE_URL": proxy.url,
        "ANTHROPIC_API_KEY": proxy.token,
    }


def _hook(setup: CliSetup, sockets: Path) -> Hook:
    """The hook of a session whose decision socket lives in `sockets`, run from the engine's
    copy of it, by the Python the sandbox holds. For an agent user the directory only lets it
    in (0711): it can reach the socket, which is its own, and run the copy, which it cannot
    change, with a Python it may run."""
    socket_path = sockets / "decide.sock"
    if setup.sandbox is not None:
        python = setup.sandbox.python
    else:
        python = setup.user.python() if setup.user else sys.executable
    if setup.user is not None:
        sockets.chmod(0o711)
        setup.user.check_reachable(sockets, "the decision socket")
    return Hook(socket_path, python=python)


def capabilities(
    setup: CliSetup, execution: AgentSession, init: JsonObject | None
) -> CapabilityReport:
    """What the engine enforces on this session and how, checked against Claude's init event
    (the tools it really offered, its MCP servers) once it has run."""
    E, U = Support.ENFORCED, Support.UNSUPPORTED
    served = [mcp_name(tool) for tool in bridged_tools(setup)]
    offered = claude_tools_for(setup.tools, setup.policy) + served
    hook = "the engine's PreToolUse hook decides every call"
    items = [
        Capability(
            "permission_mode",
            E,
            f"{execution.permission_mode}: {hook}; claude's own "
            f"--permission-mode {'plan' if execution.permission_mode == 'plan' else 'default'} "
            "behind it (never a bypass)",
        ),
        Capability("allowed_tools", E, hook),
        Capability("denied_tools", E, hook),
        Capability("sandbox_root", E, f"{hook}: paths resolved (symlinks followed) and contained"),
        Capability("fallback", E, f"{hook}; ask parks the run as a pending input"),
        Capability("engine_data", E, f"{hook}: the engine's data and .git internals are refused")
        if "bash" not in setup.tools
        else Capability(
            "engine_data",
            E,
            "the sandbox hides it and keeps .git read-only"
            + (f"; every process of the session runs as {setup.user.name}" if setup.user else "")
            + f"; {hook} too",
        )
        if setup.sandbox is not None
        else engine_data_out_of_reach(setup)
        or Capability(
            "engine_data",
            Support.BEST_EFFORT,
            f"{hook} refuses file tools on it; Bash names no path and acts as the worker's user, "
            "but the engine's secrets are masked in everything sent to the model",
        ),
        Capability("max_turns", E, "--max-turns"),
        sandbox_capability(
            setup,
            writes="the worktree read-only (plan)"
            if execution.permission_mode == "plan"
            else "writes only in the worktree, .git read-only",
        ),
        *proxy_capabilities(setup, f"{hook}: only read-only tools run"),
    ]
    if served:
        items.append(_engine_tools(setup, served, hook))
    if init is None:
        items.append(
            Capability(
                "settings",
                E,
                "--setting-sources '' --strict-mcp-config"
                + (f" (only the engine's {SERVER!r} server)" if served else "")
                + ", private HOME and CLAUDE_CONFIG_DIR (not yet checked: no init)",
            )
        )
        given = ",".join(claude_tools_for(setup.tools, setup.policy)) or "(none)"
        items.append(
            Capability("tools", E, f"--tools {given}" + "".join(f", {t}" for t in served))
        )
        return CapabilityReport(cli="claude-code", items=tuple(items))
    items.append(_settings_checked(init.get("mcp_servers") or [], bool(served)))
    reported = [str(t) for t in init.get("tools") or []]
    extra = sorted(set(reported) - set(offered))
    missing = [t for t in offered if t not in reported]
    if extra:
        items.append(Capability("tools", U, f"claude offered tools it was not given: {extra}"))
    elif missing:
        items.append(
            Capability("tools", E, f"offered {reported}; this claude has no {', '.join(missing)}")
        )
    else:
        items.append(Capability("tools", E, f"offered exactly {reported} (init)"))
    return CapabilityReport(cli="claude-code", items=tuple(items))


def _engine_tools(setup: CliSetup, served: list[str], hook: str) -> Capability:
    """The engine_tools item: the bridge's tools, and whether their token is out of reach."""
    how = (
        f"{', '.join(served)}: run by the worker with the cluster's credentials, through the "
        f"engine's MCP server {SERVER!r}; only a call {hook} allowed runs, once"
    )
    if setup.sandbox is None and setup.user is None:
        return Capability(
            "engine_tools",
            Support.BEST_EFFORT,
            f"{how}; but with no sandbox and no agent user the CLI's commands run as the "
            "worker and could read its environment, token included",
        )
    return Capability("engine_tools", Support.ENFORCED, how)


def _settings_checked(servers: list[object], bridged: bool) -> Capability:
    """The settings item against init's MCP servers: none, or only the engine's own."""
    names = [str(s.get("name")) if isinstance(s, dict) else str(s) for s in servers]
    if any(name != SERVER or not bridged for name in names):
        return Capability(
            "settings", Support.UNSUPPORTED, f"claude started MCP servers anyway: {servers}"
        )
    if bridged:
        return Capability(
            "settings",
            Support.ENFORCED,
            f"no project, local or user settings; MCP servers: only the engine's {servers} (init)",
        )
    return Capability(
        "settings", Support.ENFORCED, "no project, local or user settings; no MCP servers (init)"
    )


def bridged_tools(setup: CliSetup) -> list[str]:
    """The engine tools the session's `ade` MCP server offers: the bridged tools of its
    palette, when the engine gave it a context to run them in."""
    return bridged(setup.tools) if setup.tool_ctx is not None else []


@dataclass(frozen=True)
class ClaudeRun:
    """A finished Claude process and what the engine did to it."""

    result: ProcessResult
    stop: Stop
    spend_input: int
    spend_output: int


def run_claude(
    execution: AgentSession,
    setup: CliSetup,
    *,
    prompt: str,
    system: str | None,
    deadline: float,
    should_stop: Callable[[], bool],
    kill_grace: float,
    output_cap: int,
    on_output: Callable[[str], None] | None = None,
) -> ClaudeRun:
    """Start the proxy and the decision socket, run `claude -p` under them, and tear
    everything down, the private home included."""
    require_binary(setup)
    stop = Stop()
    home = private_home(setup, "ade-claude-")
    # The socket lives apart from the home: a Unix socket's path has at most 107 bytes, and
    # `config_home` may be deep.
    sockets = make_directory("decide-")
    key = setup.api_key()
    upstream = (setup.provider.base_url if setup.provider else None) or DEFAULT_BASE_URL
    judge = CallJudge(
        policy=setup.policy,
        tainted=setup.tainted,
        worktree=setup.worktree,
        protected=setup.protected,
        decisions=setup.decisions,
        record=setup.record,
        on_ask=lambda pending: stop.set("waiting", str(pending["reason"]), pending),
        masker=setup.masker,
        stopping=stop.refusal,
        completed=dict(setup.completed),
        bridged=frozenset(bridged_tools(setup)),
    )
    try:
        hook = _hook(setup, sockets)
        bridge_socket = sockets / "tools.sock" if judge.bridged else None
        with (
            ModelProxy(
                upstream=upstream,
                api_key=key,
                style="anthropic",
                meter=budget_meter(setup.limits, stop),
                stopped=stop.refusal,
                masker=setup.masker,
                on_refused=lambda reason: stop.set("failed", f"{reason}: check {KEY_SETTING}"),
            ) as proxy,
            DecisionServer(hook.socket_path, judge, owner=setup.user),
            _bridge(setup, bridge_socket, judge, stop),
        ):
            argv = claude_argv(
                execution, setup, prompt=prompt, system=system, hook=hook,
                bridge_socket=bridge_socket,
            )
            masker = setup.masker.with_values([proxy.token, *([key] if key else [])])
            model_socket = sockets / "model.sock"
            sandbox = session_sandbox(
                setup,
                writable=execution.permission_mode != "plan",
                private=(home,),
                read_only=(sockets, Path(hook.script).parent),
                forwards=(Forward(proxy.port, model_socket),),
            )
            with UnixBridge(model_socket, ("127.0.0.1", proxy.port), owner=setup.user):
                result = run_process(
                    argv,
                    cwd=setup.worktree,
                    env=session_env(setup, proxy, home),
                    timeout=max(deadline - time.monotonic(), 0.0),
                    kill_grace=kill_grace,
                    should_stop=lambda: stop.event.is_set() or should_stop(),
                    cap=output_cap,
                    masker=masker,
                    user=setup.user.ids if setup.user else None,
                    sandbox=sandbox,
                    on_output=on_output,
                    reuse=False,  # the sandbox binds the session's directories, removed below
                )
            spend = proxy.spend
            return ClaudeRun(result, stop, spend.input_tokens, spend.output_tokens)
    finally:
        shutil.rmtree(home, ignore_errors=True)
        shutil.rmtree(sockets, ignore_errors=True)


def _bridge(
    setup: CliSetup, path: Path | None, judge: CallJudge, stop: Stop
) -> contextlib.AbstractContextManager[object]:
    """The worker's tool bridge for the session's `ade` MCP server (nothing without one)."""
    if path is None or setup.tool_ctx is None:
        return contextlib.nullcontext()
    return ToolBridge(
        path,
        sorted(judge.bridged),
        setup.tool_ctx,
        judge.tickets,
        setup.record,
        stopping=stop.refusal,
        owner=setup.user,
    )
