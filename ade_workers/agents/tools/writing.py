"""Tools that write the worktree: create or overwrite a file, replace one exact passage.
Neither writes under `.git` nor the engine's own data (`worktree.writable`)."""

from __future__ import annotations

from ade_tasks.json_document import JsonObject
from ade_workers.agents.tools.tool import (
    STRING,
    ToolContext,
    ToolError,
    ToolResult,
    ToolSpec,
    spec,
)
from ade_workers.agents.tools.worktree import writable


def write_file(args: JsonObject, ctx: ToolContext) -> ToolResult:
    """Create or overwrite a file with the given content, creating parent directories."""
    real, rel = writable(ctx, args["path"])
    real.parent.mkdir(parents=True, exist_ok=True)
    real.write_text(args["content"], encoding="utf-8")
    size = len(args["content"].encode("utf-8"))
    return ToolResult(True, f"wrote {size} bytes to {rel}", {"path": rel, "bytes": size})


def edit_file(args: JsonObject, ctx: ToolContext) -> ToolResult:
    """Replace the one exact occurrence of `old` with `new` in a file."""
    real, rel = writable(ctx, args["path"])
    old, new = args["old"], args["new"]
    if not old:
        raise ToolError("old is empty; give the exact text to replace")
    if not real.is_file():
        raise ToolError(f"{rel} does not exist; use write_file to create it")
    text = real.read_text(encoding="utf-8")
    count = text.count(old)
    if count != 1:
        hint = "check the exact text" if count == 0 else "include more surrounding lines"
        raise ToolError(f"old occurs {count} times in {rel}, not exactly once; {hint}")
    real.write_text(text.replace(old, new, 1), encoding="utf-8")
    return ToolResult(True, f"edited {rel}", {"path": rel})


SPECS: dict[str, ToolSpec] = {
    "write_file": spec(
        "Create or overwrite a file of the worktree.",
        ["path", "content"],
        path=STRING,
        content=STRING,
    ),
    "edit_file": spec(
        "Replace the single exact occurrence of 'old' with 'new' in a file.",
        ["path", "old", "new"],
        path=STRING,
        old=STRING,
        new=STRING,
    ),
}
"""The specs of the writing tools, as providers send them to the model."""
