"""Durable agent threads: what a session with a `thread:` key keeps of its conversation, and
how much of the earlier sessions' conversation a later session with the same key is given.

One design serves every provider. When a session ends, its conversation becomes a thread entry:
a list of turns (`user`: the prompt it was given; `assistant`: the model's text; `tool`: a call
or its result, one line each), every turn capped at `TURN_CHARS` and the entry at `ENTRY_CHARS`
(its first turn, the prompt, and its latest turns are kept; a marker says how many were cut).
When a later session with the same key starts, the entries stored by then become one bounded
`Continuation`: the latest `VERBATIM_TURNS` turns (at most `VERBATIM_CHARS` characters) verbatim,
and a digest of older sessions, one line each (when, which run and step, how it ended, what it
was asked and what it answered), capped at `DIGEST_CHARS`, newest kept. However long the
thread, what a session is given is at most `CONTINUATION_CHARS` characters.

How the continuation reaches the model depends only on what the provider accepts:
- HTTP providers (openai, anthropic) get it as prior messages before the prompt
  (`as_messages`): a user message with the digest, then the verbatim turns as alternating
  user/assistant messages (a tool call or result is text in the assistant's message, never a
  tool-call message: the earlier calls' ids mean nothing to this session).
- CLI agents (claude-code, codex) get it as text in front of the prompt (`as_text`): their own
  session files lived in the earlier session's private home, which is gone.

Outsiders' text travels with a thread: an entry of a tainted session (its prompt held outsiders'
text) is tainted, and a session that continues one is tainted too (its tools narrow unless its
rule says `untrusted_input: allow`); the continuation is then fenced as untrusted data.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from ade_tasks.agents.prompt import FENCE, NOTICE
from ade_tasks.errors import InvalidInputError
from ade_tasks.json_document import JsonObject

#: A rendered key longer than this is refused (it names a thread, it is not a document).
MAX_KEY_CHARS = 200
#: One turn's text as stored.
TURN_CHARS = 2_000
#: One entry's turns as stored (its prompt and its latest turns are kept).
ENTRY_CHARS = 24_000
#: Turns a continuing session gets verbatim, and their characters at most.
VERBATIM_TURNS = 24
VERBATIM_CHARS = 30_000
#: The digest of older sessions, one line each, newest kept.
DIGEST_CHARS = 4_000
DIGEST_LINE_CHARS = 400
#: Newest entries kept per thread (older ones are deleted when a session ends).
MAX_ENTRIES = 50
#: What `as_text` / `as_messages` add around the turns, at most.
FRAME_CHARS = 2_000
CONTINUATION_CHARS = VERBATIM_CHARS + DIGEST_CHARS + FRAME_CHARS + VERBATIM_TURNS * 16

Role = Literal["user", "assistant", "tool"]


class ThreadKeyError(InvalidInputError):
    """A thread key that cannot name a thread (empty, too long, or with control characters)."""


def check_key(key: str, where: str) -> str:
    """The rendered key, stripped; ThreadKeyError saying what is wrong and what to write."""
    key = key.strip()
    example = 'e.g. thread: "pr-{{trigger.repo}}#{{trigger.number}}"'
    if not key:
        raise ThreadKeyError(
            f"{where}: the thread key rendered empty; give `thread:` a template whose values "
            f"this trigger has, {example}"
        )
    if len(key) > MAX_KEY_CHARS:
        raise ThreadKeyError(
            f"{where}: the thread key rendered to {len(key)} characters, over the limit of "
            f"{MAX_KEY_CHARS} ({key[:60]!r}...); build it from short values such as a "
            f"repository and a number, {example}"
        )
    if any(ord(c) < 32 or ord(c) == 127 for c in key):
        raise ThreadKeyError(
            f"{where}: the thread key {key[:80]!r} holds a control character (a newline?); "
            f"build it from single-line values, {example}"
        )
    return key


@dataclass(frozen=True)
class Turn:
    """One turn of a stored conversation."""

    role: Role
    text: str

    def as_dict(self) -> dict[str, str]:
        """The stored form."""
        return {"role": self.role, "text": self.text}


@dataclass(frozen=True)
class Entry:
    """One ended session of a thread, as stored (`ade_tasks.db.threads`)."""

    id: int
    run_id: str
    step_id: str
    rule_id: str
    status: str
    summary: str
    tainted: bool
    created_at: datetime
    turns: tuple[Turn, ...] = field(default_factory=tuple)

    @classmethod
    def turns_from(cls, stored: Iterable[JsonObject]) -> tuple[Turn, ...]:
        """Turns from their stored form (unknown roles read as tool lines)."""
        turns = []
        for item in stored:
            role = item.get("role")
            kind: Role = role if role in ("user", "assistant") else "tool"
            turns.append(Turn(kind, str(item.get("text", ""))))
        return tuple(turns)

    def label(self) -> str:
        """`run 1a2b3c4d step fix (2026-12-01 10:00 UTC, completed)`."""
        when = self.created_at.strftime("%Y-%m-%d %H:%M UTC")
        return f"run {self.run_id[:8]} step {self.step_id} ({when}, {self.status})"


def _cap(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]} [... {len(text) - limit} more characters cut]"


def _json(value: object, limit: int) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    return _cap(text, limit)


def turns_of(prompt: str, events: Sequence[tuple[str, JsonObject]]) -> list[Turn]:
    """A session's conversation from its recorded `agent.*` events (the HTTP tool loop's
    `model_turn` / `tool_result`, or a CLI's `message` / `tool_call` / `tool_result`)."""
    turns = [Turn("user", _cap(prompt, TURN_CHARS))]
    names: dict[str, str] = {}
    for kind, data in events:
        if kind == "agent.model_turn":
            if data.get("text"):
                turns.append(Turn("assistant", _cap(str(data["text"]), TURN_CHARS)))
            for call in data.get("tool_calls") or []:
                names[str(call.get("id"))] = str(call.get("name"))
                args = _json(call.get("arguments", {}), 300)
                turns.append(Turn("tool", f"call {call.get('name')} {args}"))
        elif kind == "agent.message" and data.get("text"):
            turns.append(Turn("assistant", _cap(str(data["text"]), TURN_CHARS)))
        elif kind == "agent.tool_call":
            names[str(data.get("id"))] = str(data.get("name"))
            turns.append(Turn("tool", f"call {data.get('name')} {_json(data.get('input'), 300)}"))
        elif kind == "agent.tool_result":
            name = data.get("tool") or names.get(str(data.get("tool_call_id", data.get("id"))))
            content = data["content"] if "content" in data else data.get("output", "")
            failed = " (error)" if data.get("is_error") else ""
            turns.append(Turn("tool", f"result of {name}{failed}: {_json(content, 1_000)}"))
    return turns


def bound_entry(turns: Sequence[Turn]) -> list[Turn]:
    """The turns an entry stores: all of them if they fit `ENTRY_CHARS`, else the first (the
    prompt), a marker, and as many of the latest as fit."""
    if sum(len(t.text) for t in turns) <= ENTRY_CHARS or len(turns) < 2:
        return list(turns)
    first, rest = turns[0], list(turns[1:])
    room = ENTRY_CHARS - len(first.text)
    kept: list[Turn] = []
    for turn in reversed(rest):
        if len(turn.text) > room:
            break
        kept.append(turn)
        room -= len(turn.text)
    cut = len(rest) - len(kept)
    return [first, Turn("tool", f"[{cut} turns of this session cut]"), *reversed(kept)]


@dataclass(frozen=True)
class Continuation:
    """What a session continuing thread `key` is given: a digest of older sessions and the
    latest turns verbatim (see the module docstring for the bounds)."""

    key: str
    runs: tuple[str, ...]
    digest: tuple[str, ...]
    turns: tuple[Turn, ...]
    tainted_runs: tuple[str, ...]
    omitted_sessions: int = 0

    @property
    def empty(self) -> bool:
        """No earlier session to continue."""
        return not self.runs


def continuation(key: str, entries: Sequence[Entry]) -> Continuation:
    """The bounded continuation of the thread's `entries` (oldest first)."""
    # (entry index, turn index in the entry, turn), oldest first
    flat = [
        (index, position, turn)
        for index, entry in enumerate(entries)
        for position, turn in enumerate(entry.turns)
    ]
    verbatim: list[Turn] = []
    size = 0
    start = len(flat)
    for at in range(len(flat) - 1, -1, -1):
        turn = flat[at][2]
        if len(verbatim) == VERBATIM_TURNS or size + len(turn.text) > VERBATIM_CHARS:
            break
        verbatim.append(turn)
        size += len(turn.text)
        start = at
    verbatim.reverse()
    # The digest covers the sessions before the verbatim window and the one it starts inside
    # of (whose prompt and beginning were cut).
    if start == len(flat):
        older = list(entries)
    else:
        index, position, _ = flat[start]
        older = list(entries[: index + (1 if position > 0 else 0)])
    lines: list[str] = []
    room = DIGEST_CHARS
    for entry in reversed(older):
        asked = entry.turns[0].text if entry.turns else ""
        line = _cap(
            f"- {entry.label()}: asked {_one_line(asked, 160)!r}; "
            f"answered {_one_line(entry.summary, 200)!r}",
            DIGEST_LINE_CHARS,
        )
        if len(line) > room:
            break
        lines.append(line)
        room -= len(line) + 1
    lines.reverse()
    return Continuation(
        key=key,
        runs=tuple(dict.fromkeys(entry.run_id for entry in entries)),
        digest=tuple(lines),
        turns=tuple(verbatim),
        tainted_runs=tuple(dict.fromkeys(e.run_id for e in entries if e.tainted)),
        omitted_sessions=len(older) - len(lines),
    )


def _one_line(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def _header(cont: Continuation) -> str:
    sessions = len(cont.runs)
    text = (
        # Not the key: it may hold text an outsider chose (a branch name), unfenced here.
        f"This session continues a thread: {sessions} earlier session"
        f"{'s' if sessions != 1 else ''} of it ran before (runs {', '.join(cont.runs[-10:])})."
    )
    if cont.digest:
        omitted = (
            f" ({cont.omitted_sessions} older sessions omitted)" if cont.omitted_sessions else ""
        )
        text += f"\nEarlier sessions, oldest first{omitted}:\n" + "\n".join(cont.digest)
    if cont.turns:
        text += "\nThe latest turns of the thread follow."
    return text


def _fence(text: str, tainted: bool) -> str:
    if not tainted:
        return text
    safe = text.replace(f"</{FENCE}", f"</ {FENCE}")
    return f'<{FENCE} field="thread">\n{safe}\n</{FENCE}>'


_SPEAKERS = {"user": "User", "assistant": "Assistant", "tool": "Tool"}


def as_text(cont: Continuation) -> str:
    """The continuation as text before a CLI agent's prompt ('' when there is none)."""
    if cont.empty:
        return ""
    tainted = bool(cont.tainted_runs)
    lines = [_header(cont)]
    lines += [f"{_SPEAKERS[t.role]}: {t.text}" for t in cont.turns]
    body = _fence("\n".join(lines), tainted)
    notice = f"{NOTICE}\n\n" if tainted else ""
    return (
        f"{notice}Earlier conversation of this thread:\n{body}\n\n"
        "End of the earlier conversation. Your new task follows.\n\n"
    )


def as_messages(cont: Continuation) -> list[JsonObject]:
    """The continuation as prior messages for an HTTP provider: alternating user/assistant
    messages, starting with the user's and ending with the assistant's ([] when none)."""
    if cont.empty:
        return []
    tainted = bool(cont.tainted_runs)
    merged: list[tuple[str, list[str]]] = [("user", [_header(cont)])]
    for turn in cont.turns:
        role = "user" if turn.role == "user" else "assistant"
        text = f"[{turn.text}]" if turn.role == "tool" else turn.text
        if merged[-1][0] == role:
            merged[-1][1].append(text)
        else:
            merged.append((role, [text]))
    if merged[-1][0] == "user":
        merged.append(("assistant", ["(the session ended without an answer)"]))
    messages = [
        {"role": role, "content": _fence("\n\n".join(parts), tainted)} for role, parts in merged
    ]
    if tainted:
        messages[0]["content"] = f"{NOTICE}\n\n{messages[0]['content']}"
    return messages
