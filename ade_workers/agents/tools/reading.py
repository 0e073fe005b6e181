"""Tools that read the worktree: a file's numbered lines, a directory, a path glob, a regex
search. Each result is capped, so one call cannot flood the model's context."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from ade_tasks.globs import glob_regex
from ade_tasks.json_document import JsonObject
from ade_tasks.patterns import PatternError, compile_pattern
from ade_workers.agents.tools.tool import (
    STRING,
    ToolContext,
    ToolError,
    ToolResult,
    ToolSpec,
    spec,
)
from ade_workers.agents.tools.worktree import hidden, is_binary, relative, resolve, walk_files

READ_CAP = 100_000
"""Characters of numbered file text one `read_file` call returns at most."""
LIST_CAP = 1_000
GREP_MATCH_CAP = 200
GREP_LINE_CAP = 300
GREP_FILE_SIZE_CAP = 2_000_000


def read_file(args: JsonObject, ctx: ToolContext) -> ToolResult:
    """Numbered lines of a text file, optionally a 1-based inclusive line range."""
    real = resolve(ctx, args["path"])
    rel = relative(ctx, real)
    if not real.is_file():
        raise ToolError(f"{rel} is not a file")
    if is_binary(real):
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


def list_dir(args: JsonObject, ctx: ToolContext) -> ToolResult:
    """The entries of a directory, directories marked with a trailing `/`."""
    real = resolve(ctx, args.get("path", "."))
    rel = relative(ctx, real)
    if not real.is_dir():
        raise ToolError(f"{rel} is not a directory")
    entries = sorted(
        f"{entry.name}/" if entry.is_dir(follow_symlinks=False) else entry.name
        for entry in os.scandir(real)
        if not hidden(ctx, entry.path)
    )
    shown = entries[:LIST_CAP]
    content = "\n".join(shown)
    if len(entries) > LIST_CAP:
        content += f"\n[... {len(entries) - LIST_CAP} more entries]"
    return ToolResult(True, content or f"[{rel} is empty]", {"path": rel, "count": len(entries)})


def glob(args: JsonObject, ctx: ToolContext) -> ToolResult:
    """Files whose worktree-relative path matches a rule-style glob (`src/**/*.py`)."""
    regex = glob_regex(args["pattern"])
    matches: list[str] = []
    for rel, _ in walk_files(ctx, Path(os.path.realpath(ctx.worktree))):
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


def grep(args: JsonObject, ctx: ToolContext) -> ToolResult:
    """Lines matching a regex in the text files under a path, as `path:line: text`. The regex
    runs on RE2 (`ade_tasks.patterns`): linear time, so a pattern a tainted prompt suggests
    cannot stall the worker on a file's long line."""
    try:
        regex = compile_pattern(args["pattern"])
    except PatternError as exc:
        raise ToolError(f"pattern is not a valid RE2 regex: {exc.message}") from None
    real = resolve(ctx, args.get("path", "."))
    only = glob_regex(args["glob"]) if args.get("glob") else None
    if real.is_file():
        files: Iterator[tuple[str, Path]] = iter([(relative(ctx, real), real)])
    elif real.is_dir():
        files = walk_files(ctx, real)
    else:
        raise ToolError(f"{relative(ctx, real)} does not exist")
    hits: list[str] = []
    for rel, path in files:
        if only is not None and not only.fullmatch(rel):
            continue
        if path.stat().st_size > GREP_FILE_SIZE_CAP or is_binary(path):
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


SPECS: dict[str, ToolSpec] = {
    "read_file": spec(
        "Read a text file of the worktree as numbered lines (1-based, inclusive range).",
        ["path"],
        path={"type": "string", "description": "Path relative to the worktree."},
        start_line={"type": "integer", "minimum": 1},
        end_line={"type": "integer", "minimum": 1},
    ),
    "list_dir": spec(
        "List a directory of the worktree; directories end with '/'.",
        [],
        path={"type": "string", "default": "."},
    ),
    "glob": spec(
        "Find files by path glob: '*' stays in one directory, '**/' spans directories.",
        ["pattern"],
        pattern={"type": "string", "description": "e.g. 'src/**/*.py'"},
    ),
    "grep": spec(
        "Search text files for a regular expression (RE2 syntax: no backreferences or "
        "lookarounds); prints path:line: text.",
        ["pattern"],
        pattern=STRING,
        path={"type": "string", "default": "."},
        glob={"type": "string", "description": "Only files whose path matches this glob."},
    ),
}
"""The specs of the reading tools, as providers send them to the model."""
