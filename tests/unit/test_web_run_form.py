"""The Run-now form read into the API's manual-run request: when to run, and each bad value
refused with its field (no services: the form's fields in, a request or an error out)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from ade_api.http.web.controls import posted_trigger
from ade_api.http.web.run_form import posted_request
from ade_tasks.errors import InvalidInputError


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
