"""The Run-now form: read into the API's manual-run request (when to run, and each bad value
refused with its field), and rendered (inputs in the order the rule declares them, also after
the database sorted the document's keys; required ones marked; a required choice with nothing
preselected). No services: the form's fields or a rule in, a request, an error or HTML out."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from ade_api.http.web.controls import posted_trigger
from ade_api.http.web.pages import TEMPLATES
from ade_api.http.web.run_form import form_fields, posted_request
from ade_tasks.errors import InvalidInputError
from ade_tasks.rules.loader import canonical_json
from ade_tasks.rules.rule import Rule


def test_empty_time_fields_mean_run_now_with_the_typed_inputs() -> None:
    body = posted_request({"key": "k", "in.greeting": "hi", "in.count": "", "run_at": " "})
    assert body.inputs == {"greeting": "hi"}
    assert body.scheduled_for(datetime.now(UTC)) is None
    assert body.force is False


def test_a_zoned_time_is_kept_as_that_moment_in_utc() -> None:
    body = posted_request({"run_at": "2099-12-24T18:00:00+01:00"})
    assert body.scheduled_for(datetime.now(UTC)) == datetime(2099, 12, 24, 17, tzinfo=UTC)


@pytest.mark.parametrize(("given", "seconds"), [("600", 600), ("10m", 600), ("2h", 7200)])
def test_a_delay_is_seconds_or_a_duration(given: str, seconds: int) -> None:
    now = datetime.now(UTC)
    body = posted_request({"delay_seconds": given, "force": "true"})
    assert body.delay_seconds == seconds and body.force is True
    assert body.scheduled_for(now) == now + timedelta(seconds=seconds)


@pytest.mark.parametrize(
    ("form", "words"),
    [
        ({"run_at": "2099-12-24T18:00:00"}, "run_at: run_at 2099-12-24T18:00:00 has no time zone"),
        ({"run_at": "2000-01-01T00:00:00Z"}, "run_at: run_at 2000-01-01T00:00:00+00:00 is "),
        ({"run_at": "2099-01-01T00:00:00Z", "delay_seconds": "1"}, "delay_seconds: give run_at"),
        ({"delay_seconds": "1.5"}, "delay_seconds '1.5': give whole seconds"),
        ({"delay_seconds": "later"}, "delay_seconds: 'later' is not a duration"),
        ({"extra": "no-equals"}, "input line 'no-equals' is not name=value"),
    ],
)
def test_a_bad_value_is_refused_naming_its_field(form: dict[str, str], words: str) -> None:
    with pytest.raises(InvalidInputError) as refused:
        posted_request(form)
    assert words in refused.value.message


def test_a_pause_form_names_the_whole_rule_or_one_trigger() -> None:
    assert posted_trigger({"trigger_index": ""}) is None
    assert posted_trigger({}) is None
    assert posted_trigger({"trigger_index": "2"}) == 2
    with pytest.raises(InvalidInputError, match="trigger_index '-1' is not a trigger's number"):
        posted_trigger({"trigger_index": "-1"})


# --- the rendered form: inputs in declared order, required ones marked, no preselected choice ---

DECLARED = {
    "target": {"type": "choice", "options": ["staging", "prod"], "required": True},
    "version": {"type": "string", "required": True, "description": "the tag to deploy"},
    "mode": {"type": "choice", "options": ["fast", "slow"], "default": "slow"},
    "dry_run": {"type": "boolean", "default": True},
    "attempts": {"type": "number", "default": 2},
    "comment": {"type": "choice", "options": ["a", "b"]},
}


def _rule(inputs: dict[str, object]) -> Rule:
    return Rule.model_validate(
        {
            "id": "deploy",
            "triggers": [{"type": "manual"}],
            "inputs": inputs,
            "execution": {"kind": "built-in", "actions": [{"type": "run-command", "command": "x"}]},
        }
    )


def _stored(rule: Rule) -> Rule:
    """The rule as read back from the database: its document's keys sorted (as the content
    hash's canonical JSON and PostgreSQL's JSONB keep them)."""
    return Rule.model_validate(json.loads(canonical_json(rule.document())))


def _form_html(rule: Rule) -> str:
    return TEMPLATES.env.get_template("run_form.html").render(
        title="Run", principal=None, can_act=True, live=False, kill_switch="",
        rule=rule, fields=form_fields(rule), key="k", offer_force=False, example="2099-01-01T00:00:00Z",
    )  # fmt: skip


def _select(html: str, name: str) -> str:
    found = re.search(rf'<select id="input-{name}".*?</select>', html, re.S)
    assert found, f"no select for {name}"
    return found.group(0)


def test_inputs_keep_their_declared_order_through_a_stored_document() -> None:
    stored = _stored(_rule(DECLARED))
    assert list(stored.inputs) == list(DECLARED)
    assert [name for name, _ in form_fields(stored)] == list(DECLARED)


def test_the_form_lists_inputs_in_declared_order() -> None:
    html = _form_html(_stored(_rule(DECLARED)))
    assert re.findall(r'data-input="([^"]+)"', html) == list(DECLARED)


def test_required_inputs_are_marked_and_the_browser_insists_on_them() -> None:
    html = _form_html(_stored(_rule(DECLARED)))
    labels = re.findall(r'<label for="input-[^"]+" class="([^"]*)" data-input="([^"]+)"', html)
    assert {name for css, name in labels if "required" in css.split()} == {"target", "version"}
    assert html.count('class="required-mark">required</strong>') == 2
    assert re.search(r'<input type="text" id="input-version" [^>]*\brequired\b', html)
    attempts = re.search(r'<input type="number" [^>]*id="input-attempts"[^>]*>', html)
    assert attempts and "required" not in attempts[0]


def test_a_required_choice_preselects_nothing_and_a_default_is_preselected() -> None:
    html = _form_html(_stored(_rule(DECLARED)))
    target = _select(html, "target")
    assert ' required aria-required="true"' in target
    assert re.findall(r'<option value="([^"]*)"( selected)?>', target) == [
        ("", " selected"), ("staging", ""), ("prod", ""),
    ]  # fmt: skip
    mode = _select(html, "mode")
    assert re.findall(r'<option value="([^"]*)"( selected)?>', mode) == [
        ("fast", ""), ("slow", " selected"),
    ]  # fmt: skip
    optional = _select(html, "comment")  # optional, no default: empty means "leave it out"
    assert "required" not in optional
    assert re.findall(r'<option value="([^"]*)"( selected)?>', optional)[0] == ("", " selected")


def test_a_stored_position_orders_the_inputs_and_a_bad_one_is_refused() -> None:
    reordered = _rule({"b": {"position": 1}, "a": {"position": 0}, "c": {}})
    assert list(reordered.inputs) == ["a", "b", "c"]
    with pytest.raises(ValidationError, match="position"):
        _rule({"a": {"position": "first"}})
