"""The engine tools by name, their specs, and `run_tool`: one call checked against its spec
and run, every failure an error result the model can read and correct, never an exception.

A new tool is a function and its spec in its family's module, plus one line in `TOOLS`."""

from __future__ import annotations

import logging

from ade_tasks.agents.policy import SERVICE_TOOLS
from ade_tasks.json_document import JsonObject
from ade_workers.agents.tools import github, notes, notify, reading, shell, writing
from ade_workers.agents.tools.tool import (
    Tool,
    ToolContext,
    ToolError,
    ToolResult,
    ToolSpec,
)

log = logging.getLogger(__name__)

TOOL_SPECS: dict[str, ToolSpec] = {
    **reading.SPECS,
    **writing.SPECS,
    **shell.SPECS,
    **notes.SPECS,
    **github.SPECS,
    **notify.SPECS,
}
"""JSON-schema specs of every engine tool, as providers send them to the model."""

TOOLS: dict[str, Tool] = {
    "read_file": reading.read_file,
    "list_dir": reading.list_dir,
    "glob": reading.glob,
    "grep": reading.grep,
    "write_file": writing.write_file,
    "edit_file": writing.edit_file,
    "bash": shell.bash,
    "todo": notes.todo,
    "report": notes.report,
    **github.TOOLS,
    "notify": notify.notify,
}
"""The engine tools by name (`ask_user` has a spec but no tool: the session answers it)."""

_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "array": (list,),
    "object": (dict,),
}


def checked_args(name: str, args: object) -> JsonObject | str:
    """`args` when they fit the tool's spec, else why not, naming the argument."""
    if not isinstance(args, dict):
        return f"{name} takes an object of arguments, got {type(args).__name__}"
    schema = TOOL_SPECS[name]["parameters"]
    for required in schema["required"]:
        if required not in args:
            return f"{name} is missing the required argument {required!r}"
    for key, value in args.items():
        prop = schema["properties"].get(key)
        if prop is None:
            return f"{name} has no argument {key!r}"
        expected = _JSON_TYPES[prop["type"]]
        if isinstance(value, bool) or not isinstance(value, expected):
            return f"{name} argument {key!r} must be a {prop['type']}"
    return args


def run_tool(name: str, args: object, ctx: ToolContext, call_id: str = "") -> ToolResult:
    """Run one tool call (`call_id`: the model's id for it, which the service tools mark their
    effects with); every failure becomes an error result, never an exception."""
    tool = TOOLS.get(name)
    if tool is None:
        return ToolResult(False, f"unknown tool {name!r}; available: {', '.join(TOOLS)}")
    checked = checked_args(name, args)
    if isinstance(checked, str):
        return ToolResult(False, checked)
    ctx.call_id = call_id
    try:
        # bash runs as the user in its own process; service tools touch no agent files.
        if ctx.user is None or tool is shell.bash or name in SERVICE_TOOLS:
            result = tool(checked, ctx)
        else:
            with ctx.user.file_access():
                result = tool(checked, ctx)
    except ToolError as exc:
        return ToolResult(False, ctx.masker.mask(f"{name}: {exc}"))
    except Exception as exc:  # a tool bug or an OS error must not end the session
        log.exception("agent tool %s failed", name)
        return ToolResult(False, ctx.masker.mask(f"{name} failed: {type(exc).__name__}: {exc}"))
    return ToolResult(result.ok, ctx.masker.mask(result.content), result.data)
