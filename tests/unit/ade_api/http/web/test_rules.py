"""The rule page's next fire times come from the one evaluator and say which fire a
daylight-saving change moved."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from ade_api.http.web import rules as web_rules
from ade_tasks.rules.rule import Rule


def test_the_rule_page_marks_a_fire_moved_by_daylight_saving(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(web_rules, "utcnow", lambda: datetime(2026, 3, 28, 12, tzinfo=UTC))
    rule = Rule.model_validate(
        {
            "id": "nightly",
            "triggers": [{"type": "schedule", "cron": "30 2 * * *", "timezone": "Europe/Berlin"}],
            "execution": {"kind": "built-in", "actions": [{"type": "run-command", "command": "x"}]},
        }
    )

    ((_, times, problem, notes),) = web_rules.next_fires(rule, 2)

    assert problem == ""
    assert [t.isoformat(" ", "minutes") for t in times] == [
        "2026-03-29 03:00+02:00",
        "2026-03-30 02:30+02:00",
    ]
    assert notes == [
        "moved: 02:30 does not exist that day (clocks jump to 03:00); dst_gap: shift",
        None,
    ]
