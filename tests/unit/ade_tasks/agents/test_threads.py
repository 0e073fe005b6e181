"""Durable agent threads, the pure part: key checks, a session's turns from its events, the
bounds of a stored entry and of what a continuing session is given."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from ade_tasks.agents.prompt import FENCE, NOTICE
from ade_tasks.agents.threads import (
    CONTINUATION_CHARS,
    ENTRY_CHARS,
    MAX_KEY_CHARS,
    VERBATIM_TURNS,
    Entry,
    ThreadKeyError,
    Turn,
    as_messages,
    as_text,
    bound_entry,
    check_key,
    continuation,
    turns_of,
)
from ade_tasks.rules.loader import parse_rule
from ade_tasks.rules.rule import Rule

WHEN = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)


def entry(n: int, *turns: Turn, tainted: bool = False, summary: str = "") -> Entry:
    return Entry(
        id=n,
        run_id=f"run-{n:04d}",
        step_id="fix",
        rule_id="pr-fix",
        status="completed",
        summary=summary or f"answer {n}",
        tainted=tainted,
        created_at=WHEN,
        turns=turns or (Turn("user", f"task {n}"), Turn("assistant", f"did {n}")),
    )


def test_a_key_is_stripped_and_kept() -> None:
    assert check_key("  pr-acme/api#7 ", "step 'fix' thread") == "pr-acme/api#7"


@pytest.mark.parametrize(
    ("key", "says"),
    [
        ("   ", "rendered empty"),
        ("x" * (MAX_KEY_CHARS + 1), f"over the limit of {MAX_KEY_CHARS}"),
        ("pr-1\nIgnore", "control character"),
    ],
)
def test_a_key_that_cannot_name_a_thread_is_refused_with_the_reason(key: str, says: str) -> None:
    with pytest.raises(ThreadKeyError) as raised:
        check_key(key, "step 'fix' thread")

    assert says in raised.value.message and "step 'fix' thread" in raised.value.message
    assert 'thread: "pr-' in raised.value.message  # says what to write


def test_an_http_sessions_events_become_turns() -> None:
    events = [
        ("agent.thread", {"key": "k"}),
        (
            "agent.model_turn",
            {
                "text": "Let me look.",
                "tool_calls": [{"id": "c1", "name": "read_file", "arguments": {"path": "a.py"}}],
            },
        ),
        (
            "agent.tool_result",
            {"tool_call_id": "c1", "tool": "read_file", "content": "print()", "is_error": False},
        ),
        ("agent.model_turn", {"text": "Fixed it.", "tool_calls": []}),
    ]

    turns = turns_of("Fix the bug", events)

    assert turns == [
        Turn("user", "Fix the bug"),
        Turn("assistant", "Let me look."),
        Turn("tool", 'call read_file {"path": "a.py"}'),
        Turn("tool", "result of read_file: print()"),
        Turn("assistant", "Fixed it."),
    ]


def test_a_cli_sessions_events_become_turns() -> None:
    events = [
        ("agent.message", {"text": "Reading."}),
        ("agent.tool_call", {"id": "t1", "name": "Read", "input": {"file_path": "a.py"}}),
        ("agent.tool_result", {"id": "t1", "output": "boom", "is_error": True}),
        ("agent.reasoning", {"text": "thinking is not kept"}),
    ]

    turns = turns_of("Fix it", events)

    assert [t.text for t in turns] == [
        "Fix it",
        "Reading.",
        'call Read {"file_path": "a.py"}',
        "result of Read (error): boom",
    ]


def test_a_long_session_is_stored_as_its_prompt_and_its_latest_turns() -> None:
    turns = [Turn("user", "the task")] + [Turn("assistant", f"{i:05d}" * 300) for i in range(40)]

    stored = bound_entry(turns)

    assert sum(len(t.text) for t in stored) <= ENTRY_CHARS + 100
    assert stored[0] == Turn("user", "the task")
    assert stored[1].text.endswith("turns of this session cut]")
    assert stored[-1] == turns[-1]


def test_a_short_thread_is_given_whole_and_alternating() -> None:
    cont = continuation("k", [entry(1), entry(2)])

    messages = as_messages(cont)

    assert cont.runs == ("run-0001", "run-0002") and not cont.digest
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant"]
    assert "task 1" in messages[0]["content"] and messages[1]["content"] == "did 1"
    assert messages[2]["content"] == "task 2" and messages[3]["content"] == "did 2"
    text = as_text(cont)
    assert "User: task 1\nAssistant: did 1\nUser: task 2\nAssistant: did 2" in text


def test_a_thread_over_the_bound_is_summarised_and_what_is_given_stays_bounded() -> None:
    big = [
        entry(
            n,
            *[Turn("user", f"task {n} " + "u" * 1_900)]
            + [Turn("assistant", f"step {n}.{i} " + "a" * 1_900) for i in range(10)],
        )
        for n in range(1, 51)
    ]  # (50 sessions of ~21,000 characters each)

    cont = continuation("k", big)
    text, messages = as_text(cont), as_messages(cont)

    assert len(text) <= CONTINUATION_CHARS
    assert sum(len(m["content"]) for m in messages) <= CONTINUATION_CHARS
    assert len(cont.turns) <= VERBATIM_TURNS and cont.turns[-1].text.startswith("step 50.9")
    # Session 50 is given verbatim; the window starts inside 49, so the digest ends with it.
    assert "run-0049" in cont.digest[-1] and "run-0050" not in "\n".join(cont.digest)
    assert cont.omitted_sessions > 0 and "older sessions omitted" in text
    assert "run-0001" not in "\n".join(cont.digest)  # the oldest fell out of the digest


def test_a_tainted_entry_is_fenced_and_noticed() -> None:
    cont = continuation("k", [entry(1, tainted=True)])

    text, messages = as_text(cont), as_messages(cont)

    assert cont.tainted_runs == ("run-0001",)
    assert text.startswith(NOTICE) and f'<{FENCE} field="thread">' in text
    assert messages[0]["content"].startswith(NOTICE)
    assert all(f"</{FENCE}>" in m["content"] for m in messages)


def test_no_earlier_session_gives_nothing() -> None:
    cont = continuation("k", [])

    assert cont.empty and as_text(cont) == "" and as_messages(cont) == []


def test_the_docs_example_is_two_rules_of_one_thread() -> None:
    doc = (Path(__file__).resolve().parents[4] / "docs" / "agents.md").read_text()
    section = doc.split("## Durable threads", 1)[1]
    block = re.search(r"```yaml\n(.*?)```", section, re.S)
    assert block is not None

    parsed = [parse_rule(d, "docs/agents.md") for d in yaml.safe_load_all(block.group(1))]

    rules = [rule for rule in parsed if isinstance(rule, Rule)]
    assert len(rules) == 2, parsed
    keys = {rule.execution.thread for rule in rules}  # type: ignore[union-attr]
    assert keys == {"pr-{{trigger.repo}}#{{trigger.number}}"}


def test_a_steps_thread_template_is_checked_when_the_rule_loads() -> None:
    document = yaml.safe_load("""
id: chain
triggers: [{type: manual}]
execution:
  kind: built-in
  actions:
    - {id: fix, type: agent-session, provider: openai, model: m, prompt: go,
       thread: "pr-{{steps.later.output}}"}
    - {id: later, type: run-command, command: "true"}
""")

    problems = parse_rule(document, "chain.yaml")

    assert not isinstance(problems, Rule)
    assert any("execution.actions.0.thread" in str(p) for p in problems), problems
