"""Step-argument templates: rendering, loud unknown variables, load-time checks."""

from __future__ import annotations

import shlex
from datetime import UTC, datetime, timedelta, timezone

import pytest

from ade_tasks.errors import AdeError
from ade_tasks.templating import (
    TemplateContext,
    TemplateError,
    check,
    lookup,
    render,
    render_value,
    variables,
)

WHERE = "step 'comment' argument body"


@pytest.fixture
def context() -> TemplateContext:
    return TemplateContext(
        trigger={
            "number": 42,
            "title": "Fix login",
            "body": None,
            "draft": False,
            "ratio": 0.5,
            "branch": "feature/x",
            "labels": ["bug", "ui"],
            "inputs": {"name": "Ada", "tags": {"a": 1}},
        },
        steps={
            "tests": {
                "output": "12 passed",
                "status": "succeeded",
                "exit_code": 0,
                "result": {"failed": 0, "report": {"path": "junit.xml"}},
            },
            "build.web": {"output": "built", "status": "failed", "exit_code": None, "result": {}},
        },
        rule={
            "id": "r-1",
            "name": "Nightly",
            "description": "",
            "project": "web",
            "billing_code": "B7",
        },
        now=datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC),
    )


# Rendering


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("#{{trigger.number}}", "#42"),
        ("{{trigger.inputs.name}}", "Ada"),
        ("{{trigger.branch}}", "feature/x"),
        ("{{trigger.labels.1}}", "ui"),
        ("{{steps.tests.output}}", "12 passed"),
        ("{{steps.tests.status}}", "succeeded"),
        ("{{steps.tests.exit_code}}", "0"),
        ("{{steps.tests.result.failed}}", "0"),
        ("{{steps.tests.result.report.path}}", "junit.xml"),
        (
            "{{rule.name}} ({{rule.id}}, {{rule.project}}, {{rule.billing_code}})",
            "Nightly (r-1, web, B7)",
        ),
        ("{{date}}", "2024-05-06"),
        ("{{time}}", "07:08"),
    ],
)
def test_each_variable_kind_renders(context: TemplateContext, text: str, expected: str) -> None:
    assert render(text, context, WHERE) == expected


def test_whitespace_inside_braces_is_allowed(context: TemplateContext) -> None:
    assert (
        render("PR {{ trigger.number }} / {{\ttrigger.title\n}}", context, WHERE)
        == "PR 42 / Fix login"
    )


def test_text_without_templates_is_returned_unchanged(context: TemplateContext) -> None:
    assert render('{"a": {"b": 1}} }}', context, WHERE) == '{"a": {"b": 1}} }}'


def test_null_renders_empty(context: TemplateContext) -> None:
    assert render("[{{trigger.body}}]", context, WHERE) == "[]"


def test_null_step_exit_code_renders_empty(context: TemplateContext) -> None:
    assert render("[{{steps.build.web.exit_code}}]", context, WHERE) == "[]"


def test_booleans_render_as_json_words(context: TemplateContext) -> None:
    assert render("{{trigger.draft}}", context, WHERE) == "false"


def test_floats_render_with_str(context: TemplateContext) -> None:
    assert render("{{trigger.ratio}}", context, WHERE) == "0.5"


def test_lists_and_dicts_render_as_compact_json(context: TemplateContext) -> None:
    rendered = render("{{trigger.labels}} {{steps.tests.result}}", context, WHERE)
    assert rendered == '["bug","ui"] {"failed":0,"report":{"path":"junit.xml"}}'


def test_time_is_rendered_in_utc(context: TemplateContext) -> None:
    # Given a context whose clock is 23:30 at UTC-2, i.e. 01:30 UTC the next day
    local = datetime(2024, 5, 6, 23, 30, tzinfo=timezone(timedelta(hours=-2)))
    shifted = TemplateContext(context.trigger, context.steps, context.rule, local)
    # Then date and time are the UTC ones
    assert render("{{date}} {{time}}", shifted, WHERE) == "2024-05-07 01:30"


def test_naive_now_is_refused(context: TemplateContext) -> None:
    with pytest.raises(TemplateError, match="naive"):
        TemplateContext(context.trigger, context.steps, context.rule, datetime(2024, 1, 1))


def test_substituted_values_are_not_rendered_again(context: TemplateContext) -> None:
    # Given a trigger field whose value looks like a template
    sneaky = TemplateContext({"title": "{{rule.billing_code}}"}, {}, context.rule, context.now)
    # Then it is substituted verbatim
    assert render("{{trigger.title}}", sneaky, WHERE) == "{{rule.billing_code}}"


def test_render_value_renders_strings_nested_in_dicts_and_lists(context: TemplateContext) -> None:
    args = {
        "body": "PR {{trigger.number}}",
        "labels": ["{{trigger.labels.0}}", 3, {"deep": "{{rule.name}}"}],
        "count": 7,
        "enabled": True,
        "nothing": None,
    }
    assert render_value(args, context, "step 'comment' arguments") == {
        "body": "PR 42",
        "labels": ["bug", 3, {"deep": "Nightly"}],
        "count": 7,
        "enabled": True,
        "nothing": None,
    }


def test_render_value_names_the_nested_argument_in_errors(context: TemplateContext) -> None:
    with pytest.raises(
        TemplateError, match=r"step 'x' arguments\.labels\[1\]: unknown variable rule\.nam;"
    ):
        render_value({"labels": ["ok", "{{rule.nam}}"]}, context, "step 'x' arguments")


def test_escape_applies_to_substituted_values_only(context: TemplateContext) -> None:
    # Given a trigger title carrying shell syntax
    hostile = TemplateContext({"title": "x; rm -rf /"}, {}, context.rule, context.now)
    # When a command is rendered with shell quoting
    command = render("echo {{trigger.title}} > out.txt", hostile, WHERE, escape=shlex.quote)
    # Then the value is one quoted word and the rule's own text is untouched
    assert shlex.split(command) == ["echo", "x; rm -rf /", ">", "out.txt"]


def test_render_value_passes_escape_down(context: TemplateContext) -> None:
    rendered = render_value({"args": ["{{trigger.title}}"]}, context, WHERE, escape=shlex.quote)
    assert rendered == {"args": ["'Fix login'"]}


# Unknown variables at run time


def test_unknown_trigger_field_names_variable_where_and_available_fields(
    context: TemplateContext,
) -> None:
    with pytest.raises(TemplateError) as caught:
        render("{{trigger.nmber}}", context, WHERE)
    assert caught.value.message == (
        "step 'comment' argument body: unknown variable trigger.nmber; available trigger fields: "
        "body, branch, draft, inputs, labels, number, ratio, title"
    )


def test_template_error_is_an_ade_error(context: TemplateContext) -> None:
    with pytest.raises(AdeError):
        render("{{nope}}", context, WHERE)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("{{trigger.inputs.nme}}", "available trigger.inputs fields: name, tags"),
        ("{{trigger.number.x}}", "trigger.number is a number, it has no field 'x'"),
        ("{{trigger.body.x}}", "trigger.body is null, it has no field 'x'"),
        ("{{trigger.labels.5}}", "trigger.labels is a list of 2 items, it has no field '5'"),
        (
            "{{steps.deploy.output}}",
            "step 'deploy' is not an earlier step; earlier steps: build.web, tests",
        ),
        ("{{steps.tests.stdout}}", "step attributes: output, status, exit_code, result"),
        ("{{steps.tests.result.missing}}", "available steps.tests.result fields: failed, report"),
        ("{{rule.owner}}", "rule fields: id, name, description, project, billing_code"),
        ("{{date.year}}", "date has no fields"),
        ("{{env.HOME}}", "variables start with trigger, steps, rule, date, time"),
    ],
)
def test_unknown_variables_raise_with_a_reason(
    context: TemplateContext, text: str, reason: str
) -> None:
    variable = text.strip("{}")
    with pytest.raises(TemplateError) as caught:
        render(f"before {text} after", context, WHERE)
    assert caught.value.message.startswith(f"{WHERE}: unknown variable {variable}; ")
    assert reason in caught.value.message


def test_rule_field_missing_from_the_context_is_unknown(context: TemplateContext) -> None:
    bare = TemplateContext(context.trigger, context.steps, {"id": "r-1"}, context.now)
    with pytest.raises(
        TemplateError, match=r"unknown variable rule\.name; available rule fields: id$"
    ):
        render("{{rule.name}}", bare, WHERE)


@pytest.mark.parametrize(
    "text", ["{{ trigger. }}", "{{}}", "{{trigger.number", "{{ a b }}", "{{{trigger.number}}}"]
)
def test_malformed_braces_raise_naming_the_fragment(context: TemplateContext, text: str) -> None:
    with pytest.raises(TemplateError, match=f"{WHERE}: malformed template '{{{{"):
        render(text, context, WHERE)


def test_lookup_returns_raw_values(context: TemplateContext) -> None:
    assert lookup("steps.tests.result", context, WHERE) == {
        "failed": 0,
        "report": {"path": "junit.xml"},
    }


# Names and load-time checks


def test_variables_lists_each_name_once_in_order() -> None:
    text = "{{ trigger.number }} {{steps.a.output}} {{trigger.number}} {{date}} {{ bad"
    assert variables(text) == ["trigger.number", "steps.a.output", "date"]


def test_check_accepts_valid_templates() -> None:
    text = "{{trigger.any.path}} {{steps.a.output}} {{steps.b.result.x.y}} {{rule.description}} {{time}}"
    assert check(text, earlier_steps=["a", "b"], where=WHERE) == []


def test_check_accepts_dotted_step_ids() -> None:
    assert check("{{steps.build.web.status}}", earlier_steps=["build.web"], where=WHERE) == []


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (
            "{{secrets.token}}",
            "unknown variable secrets.token; variables start with trigger, steps, rule, date, time",
        ),
        (
            "{{steps.c.output}}",
            "unknown variable steps.c.output; step 'c' is not an earlier step; earlier steps: a, b",
        ),
        (
            "{{steps.a.stdout}}",
            "unknown variable steps.a.stdout; step attributes: output, status, exit_code, result",
        ),
        ("{{steps.a.output.x}}", "unknown variable steps.a.output.x; step attributes"),
        ("{{steps.a}}", "unknown variable steps.a; step attributes"),
        ("{{steps}}", "unknown variable steps; name a step and an attribute"),
        (
            "{{rule.owner}}",
            "unknown variable rule.owner; rule fields: id, name, description, project, billing_code",
        ),
        ("{{rule.name.x}}", "unknown variable rule.name.x; rule fields"),
        ("{{date.day}}", "unknown variable date.day; date has no fields; write {{date}}"),
        ("{{time.hour}}", "unknown variable time.hour; time has no fields; write {{time}}"),
        ("{{trigger}}", "unknown variable trigger; name a trigger field"),
        ("{{ trigger.number", "malformed template '{{ trigger.number'"),
        ("{{ 1x }}", "malformed template '{{ 1x }}'"),
    ],
)
def test_check_reports_each_problem_kind(text: str, problem: str) -> None:
    problems = check(text, earlier_steps=["a", "b"], where=WHERE)
    assert len(problems) == 1
    assert problems[0].startswith(f"{WHERE}: {problem}")


def test_check_reports_a_later_step_as_not_earlier() -> None:
    problems = check("{{steps.later.output}}", earlier_steps=[], where=WHERE)
    assert problems == [
        f"{WHERE}: unknown variable steps.later.output; step 'later' is not an earlier step; "
        "earlier steps: none"
    ]


def test_check_reports_every_problem_without_raising() -> None:
    problems = check("{{a}} {{b}} {{ c", earlier_steps=[], where=WHERE)
    assert len(problems) == 3
