"""What codex's messages mean to the engine: a server request that asks for an approval
becomes a `CodexRequest` the engine decides, and an item codex starts or completes becomes the
neutral run events every provider records."""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ade_tasks.json_document import JsonObject

RequestKind = Literal["command", "file_change"]
Message = JsonObject
"""A JSON object codex sent (a request's params, an item): its shape is codex's."""


@dataclass(frozen=True)
class CodexRequest:
    """One approval codex asks for: a command to run or a file change to apply."""

    kind: RequestKind
    id: str  # codex's item id (the model's call id)
    command: str | None
    argv: tuple[str, ...]
    cwd: str | None
    paths: tuple[str, ...]  # the files a change touches (absolute, not normalised); () for commands
    params: Message

    def as_dict(self) -> Message:
        """The request as a run's pending input records it."""
        return {
            "kind": self.kind,
            "id": self.id,
            "command": self.command,
            "cwd": self.cwd,
            "paths": list(self.paths),
        }


def request_call(request: CodexRequest) -> tuple[str, JsonObject]:
    """A codex request as an engine tool call: (tool, input)."""
    if request.kind == "command":
        return "bash", {"command": request.command or " ".join(request.argv)}
    return "edit_file", {"paths": sorted(request.paths)}


def approval_request(
    method: str, params: Message, items: Mapping[str, Message], worktree: Path
) -> CodexRequest | None:
    """The `CodexRequest` of a server request that asks for an approval, None for others."""
    item_id = str(params.get("itemId") or params.get("callId") or params.get("call_id") or "")
    if method in ("item/commandExecution/requestApproval", "execCommandApproval"):
        command = params.get("command")
        text: str | None
        if isinstance(command, list):
            argv = tuple(str(part) for part in command)
            text = shlex.join(argv)
        else:
            text = str(command) if command is not None else None
            argv = _split(text)
        cwd = params.get("cwd")
        return CodexRequest(
            "command", item_id, text, argv, str(cwd) if cwd else None, (), dict(params)
        )
    if method in ("item/fileChange/requestApproval", "applyPatchApproval"):
        changes = params.get("fileChanges") or items.get(item_id, {}).get("changes") or []
        paths = tuple(_change_paths(changes, worktree))
        return CodexRequest("file_change", item_id, None, (), None, paths, dict(params))
    return None


def _split(text: str | None) -> tuple[str, ...]:
    if not text:
        return ()
    try:
        return tuple(shlex.split(text))
    except ValueError:
        return ()


def _change_paths(changes: object, worktree: Path) -> Iterable[str]:
    entries: Iterable[tuple[str, object]]
    if isinstance(changes, dict):  # v1: {path: change}
        entries = changes.items()
    elif isinstance(changes, list):
        entries = ((str(c.get("path", "")), c) for c in changes if isinstance(c, dict))
    else:
        return
    for path, change in entries:
        if path:
            yield os.path.join(worktree, path)
        kind = change.get("kind") if isinstance(change, dict) else None
        moved = kind.get("move_path") if isinstance(kind, dict) else None
        if moved:
            yield os.path.join(worktree, str(moved))


def item_events(item: Message, *, done: bool) -> list[tuple[str, Message]]:
    """The neutral run events of one `item/started` (done=False) or `item/completed` item."""
    kind, item_id = item.get("type"), str(item.get("id"))
    if kind == "agentMessage":
        return [("agent.message", {"text": item.get("text", "")})] if done else []
    if kind == "reasoning":
        parts = [*item.get("summary", []), *item.get("content", [])]
        text = "\n".join(str(p) for p in parts if p)
        return [("agent.reasoning", {"text": text})] if done and text else []
    if kind in ("userMessage", "hookPrompt"):
        return []
    if kind == "commandExecution":
        if not done:
            call = {"command": item.get("command"), "cwd": item.get("cwd")}
            return [
                ("agent.tool_call", {"id": item_id, "name": "command_execution", "input": call})
            ]
        status = item.get("status")
        result = {
            "id": item_id,
            "output": item.get("aggregatedOutput") or "",
            "exit_code": item.get("exitCode"),
            "is_error": status != "completed" or item.get("exitCode") not in (0, None),
        }
        return [("agent.tool_result", result)]
    if kind == "fileChange":
        if not done:
            changes = [
                {"path": c.get("path"), "kind": (c.get("kind") or {}).get("type")}
                for c in item.get("changes", [])
                if isinstance(c, dict)
            ]
            return [
                (
                    "agent.tool_call",
                    {"id": item_id, "name": "file_change", "input": {"changes": changes}},
                )
            ]
        status = item.get("status")
        result = {
            "id": item_id,
            "output": status,
            "exit_code": None,
            "is_error": status != "completed",
        }
        return [("agent.tool_result", result)]
    # Anything else codex may run (MCP or dynamic tool calls, web searches, ...): recorded, so
    # a tool the engine did not expect is never silent.
    if not done:
        return [("agent.tool_call", {"id": item_id, "name": str(kind), "input": item})]
    return [
        ("agent.tool_result", {"id": item_id, "output": item, "exit_code": None, "is_error": False})
    ]
