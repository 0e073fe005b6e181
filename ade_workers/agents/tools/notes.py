"""What the agent tells the engine: its todo list, a question for the operator (`ask_user`,
answered by the session itself, so it has a spec and no tool here) and its final report."""

from __future__ import annotations

from ade_tasks.json_document import JsonObject
from ade_workers.agents.tools.tool import (
    STRING,
    Finding,
    Todo,
    ToolContext,
    ToolError,
    ToolResult,
    ToolSpec,
    spec,
)
from ade_workers.agents.tools.worktree import relative, resolve

FINDING_SEVERITIES = ("error", "warning", "info")
TODO_STATUSES = ("pending", "in_progress", "done")


def todo(args: JsonObject, ctx: ToolContext) -> ToolResult:
    """Replace the agent's todo list and show it back."""
    items: list[Todo] = []
    for index, item in enumerate(args["items"]):
        if not isinstance(item, dict) or not isinstance(item.get("content"), str):
            raise ToolError(f"items[{index}] needs a string 'content'")
        status = item.get("status", "pending")
        if status not in TODO_STATUSES:
            raise ToolError(f"items[{index}].status must be one of {', '.join(TODO_STATUSES)}")
        items.append({"content": item["content"], "status": status})
    ctx.todos = items
    marks = {"pending": "[ ]", "in_progress": "[~]", "done": "[x]"}
    content = "\n".join(f"{marks[i['status']]} {i['content']}" for i in items)
    return ToolResult(True, content or "[todo list is empty]", {"todos": items})


def report(args: JsonObject, ctx: ToolContext) -> ToolResult:
    """Validate and store the session's final structured output."""
    summary = args["summary"].strip()
    if not summary:
        raise ToolError("summary is empty; say what was done or found")
    findings = [_finding(ctx, i, f) for i, f in enumerate(args.get("findings", []))]
    confidence = args.get("confidence")
    if confidence is not None and not 0 <= confidence <= 1:
        raise ToolError("confidence must be between 0 and 1")
    ctx.report = {"summary": summary, "findings": findings, "confidence": confidence}
    return ToolResult(True, f"report stored with {len(findings)} findings", dict(ctx.report))


def _finding(ctx: ToolContext, index: int, raw: object) -> Finding:
    where = f"findings[{index}]"
    if not isinstance(raw, dict):
        raise ToolError(f"{where} must be an object with severity, path, line, message")
    unknown = sorted(set(raw) - {"severity", "path", "line", "message"})
    if unknown:
        raise ToolError(f"{where} has unexpected keys: {', '.join(unknown)}")
    if raw.get("severity") not in FINDING_SEVERITIES:
        raise ToolError(f"{where}.severity must be one of {', '.join(FINDING_SEVERITIES)}")
    message = raw.get("message")
    if not isinstance(message, str) or not message.strip():
        raise ToolError(f"{where}.message must be a non-empty string")
    finding: Finding = {"severity": raw["severity"], "message": message.strip()}
    path = raw.get("path")
    if path is not None:
        if not isinstance(path, str):
            raise ToolError(f"{where}.path must be a string")
        finding["path"] = relative(ctx, resolve(ctx, path))
    line = raw.get("line")
    if line is not None:
        if not isinstance(line, int) or isinstance(line, bool) or line < 1:
            raise ToolError(f"{where}.line must be a positive integer")
        finding["line"] = line
    return finding


_FINDING: JsonObject = {
    "type": "object",
    "properties": {
        "severity": {"type": "string", "enum": list(FINDING_SEVERITIES)},
        "path": STRING,
        "line": {"type": "integer", "minimum": 1},
        "message": STRING,
    },
    "required": ["severity", "message"],
}
_TODO_ITEM: JsonObject = {
    "type": "object",
    "properties": {"content": STRING, "status": {"type": "string", "enum": list(TODO_STATUSES)}},
    "required": ["content"],
}

SPECS: dict[str, ToolSpec] = {
    "todo": spec(
        "Replace your todo list (status: pending, in_progress, done).",
        ["items"],
        items={"type": "array", "items": _TODO_ITEM},
    ),
    "ask_user": spec(
        "Ask the operator a question and stop until they answer; their text comes back as this "
        "call's result. Only for a decision you cannot make yourself.",
        ["question"],
        question=STRING,
    ),
    "report": spec(
        "Finish with the final structured report: a summary and any findings.",
        ["summary"],
        summary=STRING,
        findings={"type": "array", "items": _FINDING},
        confidence={"type": "number", "minimum": 0, "maximum": 1},
    ),
}
"""The specs of the notes tools and of `ask_user`, as providers send them to the model."""
