"""Claude Code's tool calls as the engine judges them: names, paths, modes, taint, approvals.

Every call of a Claude Code session reaches the engine through its PreToolUse hook
(`claude_hook.py`) before it runs. `CallJudge` turns the call into the engine's terms (the
engine tool it is, the paths it names, whether it writes), applies what the engine decides for
every provider (the permission mode, taint narrowing, the rule's policy, the engine's own data)
and records the decision as an `agent.tool_decision` event, so the audit trail is the HTTP
loop's.

Claude's own tools, and what the engine knows them as:

| Claude Code | engine tool | paths judged | writes |
|---|---|---|---|
| Read | read_file | file_path | no |
| Write | write_file | file_path | yes |
| Edit, MultiEdit | edit_file | file_path | yes |
| NotebookEdit | edit_file | notebook_path | yes |
| Bash | bash | none: judged by tool rules | - |
| Glob, Grep, LS (older CLIs) | glob, grep, list_dir | path (and an absolute pattern) | no |
| mcp__ade__github_pr, ... | github_pr, ... (the engine's tools, `tool_bridge`) | none | - |
| mcp__server__tool | mcp:server:tool | none | - |

Any other tool (WebFetch, Task, ...) keeps its own name: only `allowed_tools` can let it run.
An `ask` verdict ends the session with the call pending (`on_ask`): the run parks as it does for
HTTP providers. The call's id is derived from the tool and its input, so when the run resumes,
a fresh session repeating the same call meets the operator's answer. An allowed call of the
engine's own MCP server (`mcp__ade__*`) also gets a ticket, without which the worker's tool
bridge runs nothing (`tool_bridge.py`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ade_tasks.agents.policy import (
    COMMAND_TOOLS,
    MODE_TOOLS,
    READ_ONLY_TOOLS,
    SERVICE_TOOLS,
    WRITE_TOOLS,
    Decision,
    Policy,
    decide,
)
from ade_tasks.agents.protected import DATA_DIR_NAME, ProtectedPaths
from ade_tasks.db.approvals import ToolDecisions
from ade_tasks.json_document import JsonObject
from ade_tasks.secrets import Masker
from ade_workers.agents.cli.setup import (
    COMPLETED_EVENT,
    JOURNAL_CHARS,
    answered,
    call_id,
    replayed,
    taint_refusal,
)
from ade_workers.agents.cli.tool_bridge import BRIDGED_TOOLS, PREFIX, Tickets

Record = Callable[[str, JsonObject], None]
ENGINE_TOOLS = READ_ONLY_TOOLS | WRITE_TOOLS | COMMAND_TOOLS | SERVICE_TOOLS


@dataclass(frozen=True)
class ClaudeTool:
    """What one of Claude Code's tools is in the engine's terms."""

    engine: str
    path_fields: tuple[str, ...] = ()
    writes: bool = False


CLAUDE_TOOLS: dict[str, ClaudeTool] = {
    "Read": ClaudeTool("read_file", ("file_path",)),
    "Write": ClaudeTool("write_file", ("file_path",), writes=True),
    "Edit": ClaudeTool("edit_file", ("file_path",), writes=True),
    "MultiEdit": ClaudeTool("edit_file", ("file_path",), writes=True),
    "NotebookEdit": ClaudeTool("edit_file", ("notebook_path",), writes=True),
    "Bash": ClaudeTool("bash"),
    "Glob": ClaudeTool("glob", ("path", "pattern")),
    "Grep": ClaudeTool("grep", ("path",)),
    "LS": ClaudeTool("list_dir", ("path",)),
}
#: The Claude Code tools each engine tool is offered as (`--tools`); a CLI version that lacks
#: one says so in its init event and the capability report marks it unsupported.
ENGINE_TO_CLAUDE: dict[str, tuple[str, ...]] = {}
for _name, _tool in CLAUDE_TOOLS.items():
    ENGINE_TO_CLAUDE.setdefault(_tool.engine, ())
    ENGINE_TO_CLAUDE[_tool.engine] += (_name,)


def claude_tools_for(engine_tools: Sequence[str], policy: Policy) -> list[str]:
    """The `--tools` list: Claude's tools for the engine tools the session may use, plus any
    other tool `allowed_tools` names exactly (e.g. `WebFetch`)."""
    names = [c for tool in engine_tools for c in ENGINE_TO_CLAUDE.get(tool, ())]
    for pattern in policy.allowed_tools:
        if pattern[:1].isupper() and "*" not in pattern and pattern not in CLAUDE_TOOLS:
            names.append(pattern)
    return list(dict.fromkeys(names))


def engine_name(claude_name: str) -> str:
    """The engine's name for a Claude Code tool (`mcp__s__t` becomes `mcp:s:t`, and a tool of
    the engine's own server `mcp__ade__t` is the engine tool `t`)."""
    if claude_name in CLAUDE_TOOLS:
        return CLAUDE_TOOLS[claude_name].engine
    if claude_name.startswith(PREFIX) and claude_name[len(PREFIX) :] in BRIDGED_TOOLS:
        return claude_name[len(PREFIX) :]
    if claude_name.startswith("mcp__"):
        server, _, tool = claude_name[5:].partition("__")
        return f"mcp:{server}:{tool}"
    return claude_name


def call_paths(claude_name: str, tool_input: JsonObject, cwd: str | None = None) -> list[str]:
    """The paths a call names, absolute: relative ones are Claude's, from its current
    directory `cwd` (a `cd` in Bash moves it), not the worktree's. A Glob pattern counts when
    it is absolute or leaves its directory (`..`) or names `.ade`."""
    spec = CLAUDE_TOOLS.get(claude_name)
    paths: list[str] = []
    for name in spec.path_fields if spec else ():
        value = tool_input.get(name)
        if not isinstance(value, str) or not value:
            continue
        if name == "pattern" and not _pattern_reaches(value):
            continue
        if cwd and not os.path.isabs(value) and not value.startswith("~"):
            value = os.path.join(cwd, value)
        paths.append(value)
    return paths


def _pattern_reaches(pattern: str) -> bool:
    parts = pattern.replace("\\", "/").split("/")
    return (
        pattern.startswith(("/", "~"))
        or ".." in parts
        or DATA_DIR_NAME in (p.casefold() for p in parts)
    )


def _response_text(response: object) -> str:
    """A PostToolUse `tool_response` as text (Bash's is `{stdout, stderr, ...}`)."""
    if isinstance(response, dict) and ("stdout" in response or "stderr" in response):
        text = "\n".join(str(response.get(k) or "") for k in ("stdout", "stderr")).strip()
    elif isinstance(response, str):
        text = response
    else:
        text = json.dumps(response, default=str)
    return text[:JOURNAL_CHARS]


@dataclass
class CallJudge:
    """Decides each call of one Claude Code session (the decision server's `judge`)."""

    policy: Policy  # with the session's permission mode
    tainted: bool
    worktree: Path
    protected: ProtectedPaths | None
    decisions: ToolDecisions
    record: Record
    on_ask: Callable[[JsonObject], None]
    masker: Masker = field(default_factory=Masker.none)
    stopping: Callable[[], str | None] = lambda: None  # why the session is being stopped
    asked: JsonObject | None = None
    completed: dict[str, str] = field(default_factory=dict)
    """Calls an interrupted attempt finished: the first repeat of each gets its recorded
    result instead of running again."""
    bridged: frozenset[str] = frozenset()
    """The engine tools this session's `ade` MCP server offers (`tool_bridge`)."""
    tickets: Tickets = field(default_factory=Tickets)
    """The allowed calls of those tools, which the bridge runs once each."""

    def __call__(self, call: JsonObject) -> tuple[str, str]:
        name = str(call.get("tool_name") or "")
        raw_input = call.get("tool_input")
        tool_input = raw_input if isinstance(raw_input, dict) else {}
        ident = call_id(name, tool_input)
        if call.get("hook_event_name") == "PostToolUse":
            self.record(
                COMPLETED_EVENT,
                {
                    "id": ident,
                    "cli_id": call.get("tool_use_id"),
                    "tool": name,
                    "output": self.masker.mask(_response_text(call.get("tool_response"))),
                },
            )
            return "allow", "recorded"
        cwd = call.get("cwd")
        if ident in self.completed:
            decision = replayed(name, self.completed.pop(ident))
        else:
            decision = self.decide(name, tool_input, ident, cwd if isinstance(cwd, str) else None)
        self.record(
            "agent.tool_decision",
            {
                "id": ident,
                "cli_id": call.get("tool_use_id"),
                "tool": name,
                "engine_tool": engine_name(name),
                "input": self.masker.mask_value(tool_input),
                "verdict": decision.verdict,
                "reason": decision.reason,
            },
        )
        if decision.verdict == "allow" and name.startswith(PREFIX):
            self.tickets.issue(str(call.get("tool_use_id") or ""), name, tool_input)
        if decision.verdict != "ask":
            return decision.verdict, decision.reason
        if self.asked is None:
            self.asked = {
                "tool_call_id": ident,
                "tool": name,
                "arguments": self.masker.mask_value(tool_input),
                "reason": decision.reason,
            }
            self.on_ask(self.asked)
        return "deny", (
            f"{decision.reason}: an operator must approve this call. The session stops now and "
            "resumes when they answer; do nothing else."
        )

    def decide(
        self, name: str, tool_input: JsonObject, ident: str, cwd: str | None = None
    ) -> Decision:
        """The verdict for one call: a stopping session refuses everything, then taint and the
        mode, then the engine's policy (which keeps the engine's data and .git out of reach),
        then the operator's earlier answers."""
        engine = engine_name(name)
        stopping = self.stopping()
        if stopping is not None:
            return Decision("deny", f"the session is stopping ({stopping}); do nothing else")
        paths = call_paths(name, tool_input, cwd)
        if any(path.startswith("~") for path in paths):
            return Decision("deny", f"{name} names a path from ~; give one inside the worktree")
        if name.startswith(PREFIX) and engine not in self.bridged:
            return Decision("deny", f"{name} is not a tool of this session")
        tainted = taint_refusal(engine, self.tainted)
        if tainted is not None:
            return tainted
        if engine in ENGINE_TOOLS and engine not in MODE_TOOLS[self.policy.mode]:
            return Decision("deny", f"{engine} refused: {self.policy.mode} mode does not permit it")
        decision = decide(
            self.policy,
            engine,
            paths=paths,
            writes=CLAUDE_TOOLS[name].writes if name in CLAUDE_TOOLS else False,
            worktree=self.worktree,
            protected=self.protected,
        )
        if decision.verdict != "ask":
            return decision
        return answered(self.decisions, ident, name) or decision
