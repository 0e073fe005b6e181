"""The worker's end of the engine's tools for a CLI agent: the bridge socket the sandbox's MCP
helper (`mcp_bridge.py`) calls, and the tickets that tie each call to the engine's judgement.

Claude Code cannot call the engine's tools itself, so the engine gives it one MCP server, `ade`
(`mcp_bridge.py`, run inside the sandbox), whose tools are the session's service tools (the
`github` and `notify` palettes, `BRIDGED_TOOLS`): `mcp__ade__github_pr`, ... Claude asks the
engine's PreToolUse hook before each call like before any other; the judge (`CallJudge`)
decides it as the engine tool it names, with the rule's policy, the mode, taint and approvals.
An allowed call gets a **ticket**: Claude's id for the call, the tool and its exact arguments.
The bridge runs a call only by taking its ticket, once: the token stays in the worker, and a
command of the agent that connects to the socket itself (it is reachable: the helper runs in the
same sandbox as the agent's commands, as the same user) runs nothing the judgement did not
allow, and nothing twice.

A call runs through the same registry as the HTTP providers' (`run_tool`), marked with the
call's stable id (`call_id`, the one its decision and journal carry), so a repeat after a
resumed run finds its earlier effect and posts nothing new; it runs within the session's deadline
and is refused once the session is stopping (a budget, a pending approval). A write is recorded
as `agent.tool_started` before it runs; a refused bridge call as `agent.refused`.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ade_tasks.agents.policy import SERVICE_TOOLS
from ade_tasks.json_document import JsonObject
from ade_workers.agents.cli.decision_server import LineServer
from ade_workers.agents.cli.setup import call_id
from ade_workers.agents.http_session import REPEATABLE_TOOLS, STARTED_EVENT, Record
from ade_workers.agents.tools.registry import TOOL_SPECS, run_tool
from ade_workers.agents.tools.tool import ToolContext
from ade_workers.containment.agent_user import AgentUser

SERVER = "ade"
"""The MCP server's name: Claude Code calls its tools `mcp__ade__<tool>`."""
PREFIX = f"mcp__{SERVER}__"
BRIDGED_TOOLS = SERVICE_TOOLS
"""The engine tools a CLI session reaches through the bridge: the ones the CLI has no own tool
for (its own Read, Edit, Bash stand in for the rest)."""


def bridged(tools: Sequence[str]) -> list[str]:
    """The session's tools the bridge serves (empty: the CLI gets no MCP server)."""
    return [tool for tool in tools if tool in BRIDGED_TOOLS]


def mcp_name(tool: str) -> str:
    """Claude Code's name for an engine tool the bridge serves."""
    return PREFIX + tool


def _canonical(arguments: object) -> str:
    return json.dumps(arguments, sort_keys=True, separators=(",", ":"))


@dataclass
class Tickets:
    """The bridged calls the engine's judgement allowed and that have not run, by the CLI's
    id for each call."""

    _open: dict[str, tuple[str, str]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def issue(self, cli_id: str, tool: str, arguments: object) -> None:
        with self._lock:
            self._open[cli_id] = (tool, _canonical(arguments))

    def take(self, cli_id: object, tool: str, arguments: object) -> str | None:
        """Use the ticket of this exact call; why it cannot run when there is none."""
        if not isinstance(cli_id, str) or not cli_id:
            return "the call carries no id the engine could match to its decision"
        with self._lock:
            ticket = self._open.get(cli_id)
            if ticket is None:
                return "no decision of the engine allowed this call (or it already ran)"
            if ticket != (tool, _canonical(arguments)):
                return "it is not the call the engine allowed (another tool or other arguments)"
            del self._open[cli_id]
        return None


def mcp_tools(tools: Sequence[str]) -> list[JsonObject]:
    """The tools as MCP's `tools/list` describes them."""
    return [
        {
            "name": tool,
            "description": TOOL_SPECS[tool]["description"],
            "inputSchema": TOOL_SPECS[tool]["parameters"],
        }
        for tool in tools
    ]


class ToolBridge(LineServer):
    """Serves the session's bridged tools on `path` while the context is open: `list`, and
    `call` for a call that holds a ticket."""

    def __init__(
        self,
        path: Path,
        tools: Sequence[str],
        ctx: ToolContext,
        tickets: Tickets,
        record: Record,
        *,
        stopping: Callable[[], str | None] = lambda: None,
        owner: AgentUser | None = None,
    ) -> None:
        self.tools = list(tools)
        self._ctx = ctx
        self._tickets = tickets
        self._record = record
        self._stopping = stopping
        self._running = threading.Lock()  # ctx carries the running call's id
        super().__init__(path, self._serve_request, _failed, owner=owner, name="ade-tool-bridge")

    def _serve_request(self, request: JsonObject) -> JsonObject:
        if request.get("op") == "list":
            return {"tools": mcp_tools(self.tools)}
        if request.get("op") != "call":
            return _failed(f"unknown request {request.get('op')!r}: list or call")
        name, arguments = str(request.get("name")), request.get("arguments")
        refused = self._refusal(name, request.get("tool_use_id"), arguments)
        if refused is not None:
            self._record(
                "agent.refused",
                {"tool": mcp_name(name), "cli_id": request.get("tool_use_id"), "reason": refused},
            )
            return _failed(f"refused: {refused}")
        ident = call_id(mcp_name(name), arguments if isinstance(arguments, dict) else {})
        with self._running:
            if name not in REPEATABLE_TOOLS:
                self._record(STARTED_EVENT, {"tool_call_id": ident, "tool": name})
            result = run_tool(name, arguments, self._ctx, ident)
        return {"ok": result.ok, "content": self._ctx.masker.mask(result.content)}

    def _refusal(self, name: str, cli_id: object, arguments: object) -> str | None:
        if name not in self.tools:
            return f"{name} is not a tool of this session"
        stopping = self._stopping()
        if stopping is not None:
            return f"the session is stopping ({stopping})"
        if self._ctx.time_left() <= 0:
            return "the session's deadline has passed"
        return self._tickets.take(cli_id, mcp_name(name), arguments)


def _failed(reason: str) -> JsonObject:
    return {"ok": False, "content": reason}
