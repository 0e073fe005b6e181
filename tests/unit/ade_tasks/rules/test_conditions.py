"""Step conditions: a safe expression language with clear syntax and type errors."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import pytest

from ade_tasks.errors import AdeError
from ade_tasks.rules.conditions import (
    MAX_DEPTH,
    MAX_LENGTH,
    ConditionError,
    check_condition,
    parse_condition,
)
from ade_tasks.templating import TemplateContext

WHERE = "step 'deploy' condition"


@pytest.fixture
def context() -> TemplateContext:
    return TemplateContext(
        trigger={
            "number": 42,
            "title": "Fix login [urgent]",
            "body": None,
            "draft": False,
            "ratio": 0.5,
            "labels": ["bug", "ui"],
            "inputs": {"name": "Ada", "env": "prod"},
            "empty": [],
        },
        steps={
            "tests": {
                "output": "12 passed, 0 failed",
                "status": "succeeded",
                "exit_code": 0,
                "result": {"failed": False, "count": 12},
            },
        },
        rule={"id": "r-1", "name": "Nightly", "project": "web", "billing_code": "B7"},
        now=datetime(2024, 5, 6, 7, 8, tzinfo=UTC),
    )


def holds(text: str, context: TemplateContext) -> bool:
    return parse_condition(text, WHERE).evaluate(context)


def error_of(text: str, context: TemplateContext | None = None) -> str:
    with pytest.raises(ConditionError) as caught:
        condition = parse_condition(text, WHERE)
        if context is not None:
            condition.evaluate(context)
    return caught.value.message


# Precedence and logic


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # not binds tighter than and: (not false) and false
        ("not false and false", False),
        # and binds tighter than or: true or (false and false)
        ("true or false and false", True),
        ("(true or false) and false", False),
        # not applies to the whole comparison: not (1 == 2)
        ("not 1 == 2", True),
        ("not not true", True),
        ("false or false or true", True),
        ("true and true and false", False),
    ],
)
def test_precedence_is_not_then_and_then_or(
    context: TemplateContext, text: str, expected: bool
) -> None:
    assert holds(text, context) is expected


def test_and_short_circuits_so_a_guard_protects_a_lookup(context: TemplateContext) -> None:
    assert holds("false and steps.missing.status == 'x'", context) is False


def test_or_short_circuits(context: TemplateContext) -> None:
    assert holds("true or steps.missing.status == 'x'", context) is True


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("trigger.labels", True),
        ("trigger.empty", False),
        ("trigger.body", False),
        ("trigger.draft", False),
        ("trigger.number", True),
        ("steps.tests.exit_code", False),
        ("not steps.tests.result.failed", True),
    ],
)
def test_a_bare_name_is_its_truthiness(context: TemplateContext, text: str, expected: bool) -> None:
    assert holds(text, context) is expected


# Operators


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("steps.tests.status == 'succeeded'", True),
        ('steps.tests.status == "failed"', False),
        ("steps.tests.status != 'failed'", True),
        ("trigger.number == 42", True),
        ("trigger.number == 42.0", True),
        ("trigger.body == null", True),
        ("steps.tests.exit_code == null", False),
        ("steps.tests.exit_code != null", True),
        ("trigger.draft == false", True),
        ("trigger.labels == ['bug', 'ui']", True),
        ("trigger.labels == ['ui', 'bug']", False),
        ("trigger.number < 43", True),
        ("trigger.number <= 42", True),
        ("trigger.number > 42", False),
        ("trigger.number >= 42", True),
        ("trigger.ratio >= 0.5", True),
        ("-1 < 0", True),
        ("1e3 == 1000", True),
        ("rule.name < 'Z'", True),
        ("'bug' in trigger.labels", True),
        ("'docs' in trigger.labels", False),
        ("'login' in trigger.title", True),
        ("'env' in trigger.inputs", True),
        ("trigger.inputs.env in ['prod', 'staging']", True),
        ("'x' in trigger.body", False),
        ("trigger.labels contains 'ui'", True),
        ("trigger.title contains 'logout'", False),
        ("trigger.inputs contains 'name'", True),
        ("trigger.body contains 'x'", False),
        ("steps.tests.output matches '\\d+ passed'", True),
        ("trigger.title matches '^Fix'", True),
        ("trigger.title matches '^fix'", False),
        ("trigger.title matches '(?i)^fix'", True),
        ("trigger.body matches '.*'", False),
    ],
)
def test_each_operator(context: TemplateContext, text: str, expected: bool) -> None:
    assert holds(text, context) is expected


def test_true_is_not_equal_to_one_inside_lists(context: TemplateContext) -> None:
    assert holds("1 in [true, 'a']", context) is False


@pytest.mark.parametrize("text", ["[] == trigger.empty", "trigger.inputs.name in ['Ada',]"])
def test_list_literals_may_be_empty_or_end_with_a_comma(
    context: TemplateContext, text: str
) -> None:
    assert holds(text, context) is True


def test_string_escapes(context: TemplateContext) -> None:
    ctx = TemplateContext({"quote": 'it\'s "q"\n\\'}, {}, context.rule, context.now)
    assert holds(r"""trigger.quote == 'it\'s "q"\n\\'""", ctx) is True
    assert holds(r'''trigger.quote == "it's \"q\"\n\\"''', ctx) is True


def test_unknown_escapes_keep_the_backslash_for_regexes(context: TemplateContext) -> None:
    assert holds(r"trigger.number == 42 and '\d' == '\\d'", context) is True


# Regular expressions


def test_invalid_regex_is_refused_at_parse_time() -> None:
    message = error_of("trigger.title matches '(unclosed'")
    assert message.startswith(f"{WHERE}: invalid regular expression (")
    assert "at column 23" in message


def test_matches_needs_a_string_literal_on_the_right() -> None:
    message = error_of("trigger.title matches trigger.pattern")
    assert message == (
        f"{WHERE}: expected a quoted regular expression after 'matches' at column 23 "
        '''in "trigger.title matches trigger.pattern"'''
    )


def test_matches_needs_a_string_on_the_left(context: TemplateContext) -> None:
    message = error_of("trigger.number matches '4'", context)
    assert message == f"{WHERE}: 'matches' at column 16 needs a string on the left, got number"


# Unknown names and type errors at run time


def test_unknown_variable_is_named(context: TemplateContext) -> None:
    message = error_of("trigger.nmber == 1", context)
    assert message.startswith(
        f"{WHERE}: unknown variable trigger.nmber; available trigger fields: "
    )


def test_step_not_in_context_is_named(context: TemplateContext) -> None:
    message = error_of("steps.deploy.status == 'failed'", context)
    assert message == (
        f"{WHERE}: unknown variable steps.deploy.status; step 'deploy' is not an earlier step; "
        "earlier steps: tests"
    )


def test_python_attributes_are_not_reachable(context: TemplateContext) -> None:
    message = error_of("trigger.__class__.__name__", context)
    assert "unknown variable trigger.__class__.__name__" in message


def test_unknown_root_is_an_error_at_evaluation(context: TemplateContext) -> None:
    assert "unknown variable os.environ; variables start with" in error_of("os.environ", context)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("'a' < 3", "'<' at column 5 cannot order string and number"),
        ("trigger.labels >= 1", "'>=' at column 16 cannot order list and number"),
        ("trigger.draft < true", "'<' at column 15 cannot order bool and bool"),
        ("trigger.number == '42'", "'==' at column 16 cannot compare number with string"),
        ("trigger.draft != 0", "'!=' at column 15 cannot compare bool with number"),
        ("'a' in 3", "'in' at column 5 needs a list, string or object on the right, got number"),
        (
            "trigger.number contains 4",
            "'contains' at column 16 needs a list, string or object on the left, got number",
        ),
        (
            "3 in trigger.title",
            "'in' at column 3 can only look for a string in a string, got number",
        ),
        (
            "trigger.inputs contains 1",
            "'contains' at column 16 can only look for a string in an object, got number",
        ),
    ],
)
def test_incompatible_types_raise_naming_them(
    context: TemplateContext, text: str, reason: str
) -> None:
    assert error_of(text, context) == f"{WHERE}: {reason}"


def test_condition_errors_are_ade_errors(context: TemplateContext) -> None:
    with pytest.raises(AdeError):
        parse_condition("'a' < 3", WHERE).evaluate(context)


# Syntax errors


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("steps.tests.status == ", "expected a value at column 23"),
        ("", "expected a value at column 1"),
        ("not", "expected a value at column 4"),
        ("a and or b", "expected a value at column 7"),
        ("a == b == c", "expected 'and', 'or' or the end of the condition at column 8"),
        ("a b", "expected 'and', 'or' or the end of the condition at column 3"),
        ("(a == 1", "expected ')' (opened at column 1) at column 8"),
        ("a == 1)", "expected 'and', 'or' or the end of the condition at column 7"),
        (
            "a in [1, b]",
            "expected a string, number, true, false, null or ']' in the list at column 10",
        ),
        ("a in [1 2]", "expected ',' or ']' in the list at column 9"),
        ("a == 'open", "unterminated string at column 6"),
        ("a = 1", "unexpected character '=' at column 3"),
        ("a && b", "unexpected character '&' at column 3"),
        ("a == 1.2.3", "unexpected character '.' at column 9"),
    ],
)
def test_syntax_errors_give_the_column_and_what_was_expected(text: str, expected: str) -> None:
    assert error_of(text) == f'{WHERE}: {expected} in "{text}"'


@pytest.mark.parametrize(
    "text",
    [
        "__import__('os').system('x')",
        "open('/etc/passwd').read()",
        "trigger.title.upper()",
        "[x for x in trigger.labels]",
        "lambda: 1",
        "trigger.number + 1 > 2",
    ],
)
def test_python_code_is_a_syntax_error(text: str) -> None:
    with pytest.raises(ConditionError, match=r"(expected|unexpected) .* at column \d+ in "):
        parse_condition(text, WHERE)


def test_malicious_call_is_refused_at_the_call_parenthesis() -> None:
    assert error_of("__import__('os').system('x')") == (
        f"{WHERE}: expected 'and', 'or' or the end of the condition at column 11 "
        '''in "__import__('os').system('x')"'''
    )


# Limits


def test_too_long_a_condition_is_refused() -> None:
    text = " or ".join(["true"] * 250)
    assert len(text) > MAX_LENGTH
    assert error_of(text) == (
        f"{WHERE}: condition is {len(text)} characters long, the limit is {MAX_LENGTH}; "
        "shorten it or split the step"
    )


def test_a_condition_at_the_length_limit_parses(context: TemplateContext) -> None:
    text = "true" + " " * (MAX_LENGTH - 4)
    assert holds(text, context) is True


def test_nesting_at_the_depth_limit_parses(context: TemplateContext) -> None:
    text = "(" * MAX_DEPTH + "true" + ")" * MAX_DEPTH
    assert holds(text, context) is True


@pytest.mark.parametrize(
    "text",
    ["(" * (MAX_DEPTH + 1) + "true" + ")" * (MAX_DEPTH + 1), "not " * (MAX_DEPTH + 1) + "true"],
)
def test_nesting_beyond_the_depth_limit_is_refused(text: str) -> None:
    message = error_of(text)
    assert message.startswith(f"{WHERE}: nesting deeper than {MAX_DEPTH} levels at column ")
    assert message.endswith("; simplify the condition")


# Names and load-time checks


def test_names_lists_each_variable_once_in_order() -> None:
    condition = parse_condition(
        "steps.tests.status == 'succeeded' and ('x' in trigger.labels or steps.tests.status != 'a')",
        WHERE,
    )
    assert condition.names() == ["steps.tests.status", "trigger.labels"]


def test_conditions_are_immutable() -> None:
    condition = parse_condition("true", WHERE)
    with pytest.raises(dataclasses.FrozenInstanceError):
        condition.text = "false"  # type: ignore[misc]


def test_check_condition_accepts_a_valid_condition() -> None:
    text = "steps.tests.result.failed == false and trigger.anything and rule.billing_code != null"
    assert check_condition(text, earlier_steps=["tests"], where=WHERE) == []


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (
            "steps.deploy.status == 'ok'",
            "unknown variable steps.deploy.status; step 'deploy' is not an earlier step; earlier steps: tests",
        ),
        (
            "steps.tests.stdout",
            "unknown variable steps.tests.stdout; step attributes: output, status, exit_code, result",
        ),
        ("rule.owner == 'me'", "unknown variable rule.owner; rule fields: "),
        ("date.day == 1", "unknown variable date.day; date has no fields"),
        (
            "env.HOME",
            "unknown variable env.HOME; variables start with trigger, steps, rule, date, time",
        ),
        ("steps.tests.status ==", "expected a value at column 22"),
    ],
)
def test_check_condition_reports_each_problem_kind(text: str, problem: str) -> None:
    problems = check_condition(text, earlier_steps=["tests"], where=WHERE)
    assert len(problems) == 1
    assert problems[0].startswith(f"{WHERE}: {problem}")


def test_check_condition_reports_a_problem_per_bad_name() -> None:
    problems = check_condition("a.x or b.y or trigger.ok", earlier_steps=[], where=WHERE)
    assert [p.split(";")[0] for p in problems] == [
        f"{WHERE}: unknown variable a.x",
        f"{WHERE}: unknown variable b.y",
    ]
