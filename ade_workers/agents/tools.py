"""The engine's own agent tools, for HTTP providers: files, search, bash, a todo list, a report.

Every path an agent names is resolved inside the worktree on real paths (`resolve_inside`), so
`..`, absolute paths and symlinks (or chains of them) leading out are refused. The engine's own
data (`ProtectedPaths`: `.ade/`, the database, the token file) is refused by name and left out
of listings, globs and searches, and nothing under `.git` is written. A tool never raises to
the agent loop: `run_tool` turns bad arguments, refused paths and unexpected exceptions into
error results the model can read and correct. All output passes the masker, which also knows
the engine's own credentials (`ProtectedPaths.secrets`).
"""

from __future__ import annotations

import logging
import math
import os
import shutil
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ade_tasks.agents.protected import ProtectedPaths
from ade_tasks.errors import PolicyViolationError
from ade_tasks.globs import glob_regex
from ade_tasks.paths import resolve_inside
from ade_tasks.patterns import PatternError, compile_pattern
from ade_tasks.secrets import Masker
from ade_workers.agent_user import AgentUser
from ade_workers.process import run_process

log = logging.getLogger(__name__)

READ_CAP = 100_000
"""Characters of numbered file text one `read_file` call returns at most."""
LIST_CAP = 1_000
GREP_MATCH_CAP = 200
GREP_LINE_CAP = 300
GREP_FILE_SIZE_CAP = 2_000_000
BASH_OUTPUT_CAP = 30_000
BASH_DEFAULT_TIMEOUT = 120.0
BINARY_SNIFF = 8_192
FINDING_SEVERITIES = ("error", "warning", "info")
TODO_STATUSES = ("pending", "in_progress", "done")


class ToolError(Exception):
    """A tool could not do what was asked; the message is shown to the model."""


@dataclass(frozen=True)
class ToolResult:
    """What a tool call gives back: success, text for the model, structured data for the engine."""

    ok: bool
    content: str
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class ToolContext:
    """The session state tools act on: the worktree, the allow-listed env, what the engine
    protects, and the agent's notes.

    `protected` defaults to what the worktree alone tells (`ProtectedPaths.for_worktree`); pass
    `ProtectedPaths.from_settings` to protect the configured data dir and database too. Its
    secrets join the masker.
    """

    worktree: Path
    env: Mapping[str, str]
    masker: Masker = field(default_factory=Masker.none)
    kill_grace: float = 3.0
    should_stop: Callable[[], bool] = lambda: False
    time_left: Callable[[], float] = lambda: math.inf
    todos: list[dict[str, str]] = field(default_factory=list)
    report: dict[str, Any] | None = None
    protected: ProtectedPaths | None = None
    user: AgentUser | None = None  # who `bash` runs as, when not the worker (ADE_AGENT_USER)

    def __post_init__(self) -> None:
        if self.protected is None:
            self.protected = ProtectedPaths.for_worktree(self.worktree)
        if self.protected.secrets:
            self.masker = self.masker.with_values(self.protected.secrets)

    @property
    def guard(self) -> ProtectedPaths:
        """What the engine protects in this worktree."""
        assert self.protected is not None  # set in __post_init__
        return self.protected


Tool = Callable[[dict[str, Any], ToolContext], ToolResult]


# --- paths ---------------------------------------------------------------------------------


def _resolve(ctx: ToolContext, path: str, *, writes: bool = False) -> Path:
    if not path:
        raise ToolError("path is empty; give a path relative to the worktree")
    if "\x00" in path:
        raise ToolError(f"path {path!r} contains a NUL byte; give a path relative to the worktree")
    if os.path.isabs(path):
        raise ToolError(f"path {path!r} is absolute; give a path relative to the worktree")
    refusal = ctx.guard.refusal(path, writes=writes)
    if refusal is not None:
        raise ToolError(f"refused: {refusal}")
    try:
        return resolve_inside(ctx.worktree, path)
    except PolicyViolationError as exc:
        raise ToolError(f"refused: {exc.message}") from None


def _relative(ctx: ToolContext, real: Path) -> str:
    rel = os.path.relpath(real, os.path.realpath(ctx.worktree))
    return Path(rel).as_posix()


def _is_binary(path: Path) -> bool:
    with path.open("rb") as handle:
        return b"\x00" in handle.read(BINARY_SNIFF)


def _hidden(ctx: ToolContext, full: str) -> bool:
    """Whether a listing leaves `full` out: engine data, by its name or where it leads."""
    return ctx.guard.hides(full) or ctx.guard.hides(os.path.realpath(full))


def _walk_files(ctx: ToolContext, start: Path) -> Iterator[tuple[str, Path]]:
    """(relative path, real path) of every file under `start`, skipping .git, the engine's
    data and escapes."""
    real_root = os.path.realpath(ctx.worktree)
    for dirpath, dirnames, filenames in os.walk(start):  # never follows directory symlinks
        dirnames[:] = sorted(
            d for d in dirnames if d != ".git" and not _hidden(ctx, os.path.join(dirpath, d))
        )
        for name in sorted(filenames):
            full = os.path.join(dirpath, name)
            real = os.path.realpath(full)
            if os.path.commonpath([real_root, real]) != real_root or not os.path.isfile(real):
                continue  # a symlink leading out of the worktree, or to nothing
            if _hidden(ctx, full):
                continue  # the engine's data, or a symlink to it
            yield Path(os.path.relpath(full, real_root)).as_posix(), Path(real)


# --- tools ---------------------------------------------------------------------------------


def read_file(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    """Numbered lines of a text file, optionally a 1-based inclusive line range."""
    real = _resolve(ctx, args["path"])
    rel = _relative(ctx, real)
    if not real.is_file():
        raise ToolError(f"{rel} is not a file")
    if _is_binary(real):
        raise ToolError(f"{rel} is a binary file")
    start = args.get("start_line", 1)
    end = args.get("end_line")
    if start < 1 or (end is not None and end < start):
        raise ToolError(f"bad line range {start}..{end}; lines count from 1 and end >= start")
    out: list[str] = []
    size = 0
    last = start - 1
    truncated = False
    with real.open(encoding="utf-8", errors="replace") as handle:
        for number, line in enumerate(handle, 1):
            if number < start:
                continue
            if end is not None and number > end:
                break
            numbered = f"{number:>6}\t{line.rstrip(chr(10))}\n"
            if size + len(numbered) > READ_CAP:
                truncated = True
                break
            out.append(numbered)
            size += len(numbered)
            last = number
    content = "".join(out)
    if truncated:
        content += f"[... truncated at {READ_CAP} characters; read on with start_line={last + 1}]\n"
    elif not out:
        content = f"[{rel} has no lines in the range {start}..{end or 'end'}]\n"
    data = {"path": rel, "start_line": start, "end_line": last, "truncated": truncated}
    return ToolResult(True, content, data)


def list_dir(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    """The entries of a directory, directories marked with a trailing `/`."""
    real = _resolve(ctx, args.get("path", "."))
    rel = _relative(ctx, real)
    if not real.is_dir():
        raise ToolError(f"{rel} is not a directory")
    entries = sorted(
        f"{entry.name}/" if entry.is_dir(follow_symlinks=False) else entry.name
        for entry in os.scandir(real)
        if not _hidden(ctx, entry.path)
    )
    shown = entries[:LIST_CAP]
    content = "\n".join(shown)
    if len(entries) > LIST_CAP:
        content += f"\n[... {len(entries) - LIST_CAP} more entries]"
    return ToolResult(True, content or f"[{rel} is empty]", {"path": rel, "count": len(entries)})


def glob(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    """Files whose worktree-relative path matches a rule-style glob (`src/**/*.py`)."""
    regex = glob_regex(args["pattern"])
    matches: list[str] = []
    for rel, _ in _walk_files(ctx, Path(os.path.realpath(ctx.worktree))):
        if regex.fullmatch(rel):
            matches.append(rel)
            if len(matches) > LIST_CAP:
                break
    truncated = len(matches) > LIST_CAP
    content = "\n".join(matches[:LIST_CAP])
    if truncated:
        content += f"\n[... more than {LIST_CAP} matches; narrow the pattern]"
    data = {"matches": matches[:LIST_CAP], "truncated": truncated}
    return ToolResult(True, content or "[no files match]", data)


def grep(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    """Lines matching a regex in the text files under a path, as `path:line: text`. The regex
    runs on RE2 (`ade_tasks.patterns`): linear time, so a pattern a tainted prompt suggests
    cannot stall the worker on a file's long line."""
    try:
        regex = compile_pattern(args["pattern"])
    except PatternError as exc:
        raise ToolError(f"pattern is not a valid RE2 regex: {exc.message}") from None
    real = _resolve(ctx, args.get("path", "."))
    only = glob_regex(args["glob"]) if args.get("glob") else None
    if real.is_file():
        files: Iterator[tuple[str, Path]] = iter([(_relative(ctx, real), real)])
    elif real.is_dir():
        files = _walk_files(ctx, real)
    else:
        raise ToolError(f"{_relative(ctx, real)} does not exist")
    hits: list[str] = []
    for rel, path in files:
        if only is not None and not only.fullmatch(rel):
            continue
        if path.stat().st_size > GREP_FILE_SIZE_CAP or _is_binary(path):
            continue
        with path.open(encoding="utf-8", errors="replace") as handle:
            for number, line in enumerate(handle, 1):
                if regex.search(line, limit=GREP_FILE_SIZE_CAP):
                    hits.append(f"{rel}:{number}: {line.rstrip()[:GREP_LINE_CAP]}")
                    if len(hits) > GREP_MATCH_CAP:
                        break
        if len(hits) > GREP_MATCH_CAP:
            break
    truncated = len(hits) > GREP_MATCH_CAP
    content = "\n".join(hits[:GREP_MATCH_CAP])
    if truncated:
        content += f"\n[... more than {GREP_MATCH_CAP} matches; narrow the pattern or path]"
    data = {"count": min(len(hits), GREP_MATCH_CAP), "truncated": truncated}
    return ToolResult(True, content or "[no matches]", data)


def _writable(ctx: ToolContext, path: str) -> tuple[Path, str]:
    # Git runs hooks and reads config from .git: a write there would reach beyond the worktree.
    real = _resolve(ctx, path, writes=True)
    rel = _relative(ctx, real)
    if real.is_dir():
        raise ToolError(f"{rel} is a directory")
    return real, rel


def write_file(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    """Create or overwrite a file with the given content, creating parent directories."""
    real, rel = _writable(ctx, args["path"])
    real.parent.mkdir(parents=True, exist_ok=True)
    real.write_text(args["content"], encoding="utf-8")
    size = len(args["content"].encode("utf-8"))
    return ToolResult(True, f"wrote {size} bytes to {rel}", {"path": rel, "bytes": size})


def edit_file(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    """Replace the one exact occurrence of `old` with `new` in a file."""
    real, rel = _writable(ctx, args["path"])
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


def bash(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    """Run a shell command in the worktree, in a container of its own, with a deadline."""
    left = ctx.time_left()
    if left <= 0:
        raise ToolError("the session has no time left to run commands")
    timeout = min(float(args.get("timeout_sec", BASH_DEFAULT_TIMEOUT)), left)
    if timeout <= 0:
        raise ToolError("timeout_sec must be positive")
    shell = shutil.which("bash", path=ctx.env.get("PATH")) or "/bin/sh"
    result = run_process(
        [shell, "-c", args["command"]],
        cwd=Path(os.path.realpath(ctx.worktree)),
        env=ctx.env,
        timeout=timeout,
        kill_grace=ctx.kill_grace,
        should_stop=ctx.should_stop,
        cap=BASH_OUTPUT_CAP,
        masker=ctx.masker,
        user=ctx.user.ids if ctx.user else None,
    )
    if result.timed_out:
        footer = f"[timed out after {timeout:g}s; everything the command started was killed]"
    elif result.cancelled:
        footer = "[cancelled; everything the command started was killed]"
    else:
        footer = f"[exit code {result.exit_code}]"
    data = {
        "exit_code": result.exit_code,
        "timed_out": result.timed_out,
        "cancelled": result.cancelled,
        "duration": round(result.duration, 3),
    }
    content = f"{result.output.rstrip()}\n{footer}".lstrip("\n")
    return ToolResult(result.exit_code == 0, content, data)


def todo(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    """Replace the agent's todo list and show it back."""
    items: list[dict[str, str]] = []
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


def report(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
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


def _finding(ctx: ToolContext, index: int, raw: Any) -> dict[str, Any]:
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
    finding: dict[str, Any] = {"severity": raw["severity"], "message": message.strip()}
    path = raw.get("path")
    if path is not None:
        if not isinstance(path, str):
            raise ToolError(f"{where}.path must be a string")
        finding["path"] = _relative(ctx, _resolve(ctx, path))
    line = raw.get("line")
    if line is not None:
        if not isinstance(line, int) or isinstance(line, bool) or line < 1:
            raise ToolError(f"{where}.line must be a positive integer")
        finding["line"] = line
    return finding


# --- specs and dispatch --------------------------------------------------------------------


def _spec(description: str, required: list[str], **properties: dict[str, Any]) -> dict[str, Any]:
    return {
        "description": description,
        "parameters": {
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": False,
        },
    }


_STR: dict[str, Any] = {"type": "string"}
_FINDING = {
    "type": "object",
    "properties": {
        "severity": {"type": "string", "enum": list(FINDING_SEVERITIES)},
        "path": _STR,
        "line": {"type": "integer", "minimum": 1},
        "message": _STR,
    },
    "required": ["severity", "message"],
}
_TODO_ITEM = {
    "type": "object",
    "properties": {"content": _STR, "status": {"type": "string", "enum": list(TODO_STATUSES)}},
    "required": ["content"],
}

TOOL_SPECS: dict[str, dict[str, Any]] = {
    "read_file": _spec(
        "Read a text file of the worktree as numbered lines (1-based, inclusive range).",
        ["path"],
        path={"type": "string", "description": "Path relative to the worktree."},
        start_line={"type": "integer", "minimum": 1},
        end_line={"type": "integer", "minimum": 1},
    ),
    "list_dir": _spec(
        "List a directory of the worktree; directories end with '/'.",
        [],
        path={"type": "string", "default": "."},
    ),
    "glob": _spec(
        "Find files by path glob: '*' stays in one directory, '**/' spans directories.",
        ["pattern"],
        pattern={"type": "string", "description": "e.g. 'src/**/*.py'"},
    ),
    "grep": _spec(
        "Search text files for a regular expression (RE2 syntax: no backreferences or "
        "lookarounds); prints path:line: text.",
        ["pattern"],
        pattern=_STR,
        path={"type": "string", "default": "."},
        glob={"type": "string", "description": "Only files whose path matches this glob."},
    ),
    "write_file": _spec(
        "Create or overwrite a file of the worktree.", ["path", "content"], path=_STR, content=_STR
    ),
    "edit_file": _spec(
        "Replace the single exact occurrence of 'old' with 'new' in a file.",
        ["path", "old", "new"],
        path=_STR,
        old=_STR,
        new=_STR,
    ),
    "bash": _spec(
        "Run a shell command in the worktree; output is capped and secrets are masked.",
        ["command"],
        command=_STR,
        timeout_sec={"type": "number", "exclusiveMinimum": 0},
    ),
    "todo": _spec(
        "Replace your todo list (status: pending, in_progress, done).",
        ["items"],
        items={"type": "array", "items": _TODO_ITEM},
    ),
    "ask_user": _spec(
        "Ask the operator a question and stop until they answer; their text comes back as this "
        "call's result. Only for a decision you cannot make yourself.",
        ["question"],
        question=_STR,
    ),
    "report": _spec(
        "Finish with the final structured report: a summary and any findings.",
        ["summary"],
        summary=_STR,
        findings={"type": "array", "items": _FINDING},
        confidence={"type": "number", "minimum": 0, "maximum": 1},
    ),
}
"""JSON-schema specs of every engine tool, as providers send them to the model."""

TOOLS: dict[str, Tool] = {
    "read_file": read_file,
    "list_dir": list_dir,
    "glob": glob,
    "grep": grep,
    "write_file": write_file,
    "edit_file": edit_file,
    "bash": bash,
    "todo": todo,
    "report": report,
}
"""The engine tools by name."""

_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "array": (list,),
    "object": (dict,),
}


def _check_args(name: str, args: Any) -> str | None:
    """Why `args` do not fit the tool's spec, naming the argument; None when they fit."""
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
    return None


def run_tool(name: str, args: Any, ctx: ToolContext) -> ToolResult:
    """Run one tool call; every failure becomes an error result, never an exception."""
    tool = TOOLS.get(name)
    if tool is None:
        return ToolResult(False, f"unknown tool {name!r}; available: {', '.join(TOOLS)}")
    problem = _check_args(name, args)
    if problem is not None:
        return ToolResult(False, problem)
    try:
        if ctx.user is None or tool is bash:  # bash runs as the user in its own process
            result = tool(args, ctx)
        else:
            with ctx.user.file_access():
                result = tool(args, ctx)
    except ToolError as exc:
        return ToolResult(False, ctx.masker.mask(f"{name}: {exc}"))
    except Exception as exc:  # a tool bug or an OS error must not end the session
        log.exception("agent tool %s failed", name)
        return ToolResult(False, ctx.masker.mask(f"{name} failed: {type(exc).__name__}: {exc}"))
    return ToolResult(result.ok, ctx.masker.mask(result.content), result.data)
