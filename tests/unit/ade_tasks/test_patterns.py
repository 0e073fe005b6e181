"""Rule authors' regexes (trigger filters, hook `matches` filters, step conditions, path globs)
run in linear time on RE2, and what RE2 cannot express is refused at validation with the field
and what to write instead."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from pydantic import ValidationError

from ade_tasks.hooks.config import JsonFilter, filters_match
from ade_tasks.ingress.event import NormalizedEvent
from ade_tasks.patterns import (
    MAX_SUBJECT_CHARS,
    PatternError,
    SubjectTooLongError,
    compile_pattern,
)
from ade_tasks.rules.conditions import ConditionError, parse_condition
from ade_tasks.rules.loader import load_rules_dir
from ade_tasks.rules.rule import Rule
from ade_tasks.triggers.filters import why_not
from tests.conftest import REPO, write_rule

#: Each site matches `(a+)+$` (exponential for a backtracking engine) against POISON and
#: prints the outcome. Python's `re` would not return within the age of the universe.
SITES = {
    "trigger title_regex": """
        from ade_tasks.ingress.event import NormalizedEvent
        from ade_tasks.triggers.filters import trigger_matches
        from pydantic import TypeAdapter
        from ade_tasks.rules.triggers import Trigger
        trigger = TypeAdapter(Trigger).validate_python(
            {"type": "github.pr_opened", "title_regex": "(a+)+$", "body_regex": "(a+)+$"}
        )
        event = NormalizedEvent(
            "github", "d", "pull_request.opened", trigger_type="github.pr_opened",
            title=POISON, body=POISON,
        )
        print(trigger_matches(trigger, event))
    """,
    "hook matches filter": """
        from ade_tasks.hooks.config import JsonFilter
        print(JsonFilter(path="title", op="matches", value="(a+)+$").evaluate({"title": POISON}))
    """,
    "step condition matches": """
        from datetime import UTC, datetime
        from ade_tasks.rules.conditions import parse_condition
        from ade_tasks.templating import TemplateContext
        context = TemplateContext({"title": POISON}, {}, {}, datetime.now(UTC))
        print(parse_condition("trigger.title matches '(a+)+$'", "here").evaluate(context))
    """,
    "path glob": """
        from ade_tasks.globs import path_matches
        print(path_matches("a" * 250 + "b", ["*a*a*a*a*a*a*c"]))
    """,
}


@pytest.mark.parametrize("site", SITES)
def test_a_catastrophic_pattern_returns_at_once_on_hostile_text(site: str) -> None:
    code = 'POISON = "a" * 5000 + "!"\n' + textwrap.dedent(SITES[site])

    # A generous deadline: RE2 answers in milliseconds, a backtracking engine never does.
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60
    )

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def test_re2_syntax_still_matches_what_it_says() -> None:
    pattern = compile_pattern(r"(?i)^\[wip\]\s+(fix|feat)(\(\w+\))?: .+$")

    assert pattern.search("[WIP]  feat(api): add thing")
    assert not pattern.search("feat: no prefix")
    assert compile_pattern("src/.*\\.py").fullmatch("src/a/b.py")


@pytest.mark.parametrize(
    ("pattern", "feature", "advice"),
    [
        (r"(\w+) \1", r"a backreference (\1)", "spell the repeated text out"),
        (r"(?P<w>\w+) (?P=w)", "a backreference ((?P=name))", "spell the repeated text out"),
        (r"fix(?=ed)", "lookahead (?=...)", "match the text itself"),
        (r"fix(?!ed)", "negative lookahead (?!...)", "second filter"),
        (r"(?<=@)ade", "lookbehind", "match the preceding text too"),
        (r"(?>a+)b", "an atomic group", "drop the `?>`"),
        (r"a++b", "a possessive quantifier", "write the plain quantifier"),
        (r"end\Z", "\\Z", "write \\z"),
        (r"(?x) a b", "the verbose flag (?x)", "remove the whitespace"),
        (r"a{5000}", "a counted repetition above {1000}", "use + or *"),
    ],
)
def test_what_re2_cannot_express_is_refused_saying_what_to_write(
    pattern: str, feature: str, advice: str
) -> None:
    with pytest.raises(PatternError) as caught:
        compile_pattern(pattern)

    message = caught.value.message
    assert f"uses {feature}" in message and "which RE2 cannot express" in message
    assert advice in message
    assert "linear time" in message


def test_a_pattern_whose_program_is_too_large_is_refused() -> None:
    with pytest.raises(PatternError, match="too complex for a rule regex: it compiles to 3,004"):
        compile_pattern(r"(\w+\s?){300}$")


def test_a_text_over_the_bound_is_refused_not_searched_in_part() -> None:
    pattern = compile_pattern("x$")

    with pytest.raises(SubjectTooLongError, match="searches at most 131,072"):
        pattern.search("a" * MAX_SUBJECT_CHARS + "x")
    assert pattern.search("a" * (MAX_SUBJECT_CHARS - 1) + "x")


def test_a_rule_file_with_a_lookahead_is_refused_with_file_and_field(tmp_path: Path) -> None:
    write_rule(tmp_path, "pr.yaml", """
        id: pr
        triggers: [{type: github.pr_opened, title_regex: "^fix(?!up)"}]
        execution: {kind: built-in, actions: [{type: run-command, command: "true"}]}
        """)  # fmt: skip

    (problem,) = load_rules_dir(tmp_path).problems

    assert problem.file.endswith("pr.yaml")
    assert problem.field == "triggers.0.title_regex"
    assert "uses negative lookahead (?!...), which RE2 cannot express" in problem.reason


def test_a_rule_stored_before_re2_reads_back_and_its_regex_matches_nothing() -> None:
    document = {
        "id": "legacy",
        "triggers": [{"type": "github.pr_opened", "title_regex": "^fix(?!up)"}],
        "execution": {"kind": "built-in", "actions": [{"type": "run-command", "command": "true"}]},
    }
    event = NormalizedEvent(
        "github", "d", "pull_request.opened", trigger_type="github.pr_opened", title="fix it"
    )

    stored = Rule.model_validate(document)  # read back: no admission checks

    reason = why_not(stored.triggers[0], event)
    assert reason is not None and reason.startswith("title_regex is invalid: ")
    assert "uses negative lookahead" in reason


def test_a_hook_filter_with_a_backreference_is_refused() -> None:
    with pytest.raises(ValidationError, match=r"value: '\(a\)\\\\1' uses a backreference"):
        JsonFilter(path="title", op="matches", value=r"(a)\1")


def test_a_hook_filter_over_a_too_long_value_does_not_match_and_says_why() -> None:
    matches = JsonFilter(path="log", op="matches", value="error")

    admitted, why = filters_match([matches], {"log": "error " * 30_000})

    assert admitted is False
    assert why is not None and "searches at most 131,072" in why


def test_a_condition_with_a_lookbehind_is_refused_at_parse_time() -> None:
    with pytest.raises(ConditionError, match="uses lookbehind"):
        parse_condition("trigger.title matches '(?<=a)b'", "step 's' condition")
