"""A rule stored by an earlier version whose cron this version refuses, or reads with another
meaning (`5-5` was every minute; `*/2 * 1` took either day field), is that trigger's problem: it
never fires under the old meaning, the rule's other triggers and every other rule keep firing,
and `rules next` (the schedule API, rule health) says why and what to do. Storing the rule again
confirms the new meaning."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from ade_api.cli import main
from ade_tasks.clock import utcnow
from ade_tasks.db.engine import SessionFactory
from ade_tasks.rules.loader import parse_rule
from ade_tasks.rules.rule import Rule
from ade_tasks.rules.schedules import rule_schedules
from ade_tasks.schedule.scheduler import Scheduler
from ade_tasks.testing import InMemorySender
from tests.scheduler_support import FakeClock, write_minutely_rules
from tests.unit.ade_api.cli.test_rules_next import Answer, api_answers, preview  # noqa: F401 (fixture)
from tests.unit.ade_tasks.schedule.test_scheduler_boundaries import ACTIONS, store_rule


def stored(rule_id: str, *crons: str | dict[str, str]) -> dict[str, object]:
    triggers = [{"type": "schedule", **(c if isinstance(c, dict) else {"cron": c})} for c in crons]
    guardrails = {"overlap": "allow-all"}  # no worker runs them: each slot fires anyway
    return {"id": rule_id, "triggers": triggers, "execution": ACTIONS, "guardrails": guardrails}


CHANGED = {
    "5-5 * * * *": "read a range like 5-5 as * (every value); it now means that one value "
    "('5 * * * *')",
    "0 0 */2 * 1": "add `day_match: all` (both must match) or `day_match: any` (either)",
    "R * * * *": "minute field 'R': `R` (a random or hashed value) is not supported",
    "0 0 * * FRI-MON": "write FRI-SAT,SUN-MON (stored by an earlier version that accepted it",
}


@pytest.mark.parametrize(("cron", "says"), CHANGED.items())
def test_a_changed_or_refused_stored_cron_is_its_triggers_problem_alone(
    session_factory: SessionFactory, rules_dir: Path, cron: str, says: str
) -> None:
    # Given a rule stored before this version, beside a good trigger and another rule
    write_minutely_rules(session_factory, rules_dir, 1)
    store_rule(session_factory, stored("old", cron, "* * * * *"))
    clock = FakeClock()
    beat = Scheduler(session_factory, InMemorySender(), "beat", clock=clock)

    # When the beat runs for a few minutes
    fired = []
    for _ in range(3):
        fired += beat.tick().fired
        clock.advance(60)

    # Then the old trigger never fired, and everything else did, every minute
    assert {(key.rule_id, key.trigger_index) for key in fired} == {
        ("every-minute-0000", 0),
        ("old", 1),
    }
    assert len([key for key in fired if key.rule_id == "old"]) == 2
    assert list(beat.problems) == [("old", 0)]
    assert says in beat.problems[("old", 0)]


def test_an_explicit_day_rule_is_no_change(session_factory: SessionFactory) -> None:
    rule = Rule.model_validate(stored("ok", {"cron": "0 0 */2 * 1", "day_match": "any"}))
    (found,) = rule_schedules(rule, utcnow(), 2)
    assert found.problem is None and len(found.times) == 2


def test_storing_the_rule_again_takes_the_new_meaning() -> None:
    # What a sync or an API save does with the old document: admit it again.
    admitted = parse_rule(stored("old", "5-5 * * * *", "0 0 */2 * 1"), "old.yaml")
    assert isinstance(admitted, Rule)
    again = Rule.model_validate(admitted.document())
    assert [found.problem for found in rule_schedules(again, utcnow(), 1)] == [None, None]
    assert admitted.document()["triggers"] == [  # the meaning, written down
        {"type": "schedule", "cron": "5 * * * *", "timezone": "UTC"},
        {"type": "schedule", "cron": "0 0 */2 * 1", "timezone": "UTC", "day_match": "all"},
    ]


def test_rules_next_names_the_problem_and_what_to_do(
    session_factory: SessionFactory,
    api_answers: Answer,  # noqa: F811
) -> None:
    store_rule(session_factory, stored("old", "5-5 * * * *"))
    api_answers(preview(session_factory, "old", 2))

    result = CliRunner().invoke(main, ["rules", "next", "old"])

    assert result.exit_code == 0, result.output
    assert "problem: triggers.0: cron '5-5 * * * *' was stored by an earlier version" in (
        result.output
    )
    assert "sync its file or save it to take the new meaning" in result.output
