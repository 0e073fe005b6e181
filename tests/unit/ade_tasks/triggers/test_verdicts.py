"""Matching explained (issue 36, finding 5), on SQLite: every ingress event keeps, per rule with
a trigger of its type, what became of it (matched with its run, refused by which filter and
what it saw, paused, disabled, untrusted, skipped, held by the kill switch), bounded in size."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import update

from ade_tasks.db import pauses as pauses_db
from ade_tasks.db.engine import SessionFactory
from ade_tasks.db.rules import UNTRUSTED
from ade_tasks.db.schema import RuleRow
from ade_tasks.states import IngressStatus
from ade_tasks.testing import InMemorySender
from ade_tasks.triggers import verdicts
from ade_tasks.triggers.ingress_events import match_ingress_event
from tests.unit.ade_tasks.triggers.test_ingress_events import event_of, rule, store_pr
from tests.unit.conftest import add_rule

HELLO = "Codertocat/Hello-World"


def pr_rule(rule_id: str, filters: str = "", extra: str = "") -> str:
    return rule(rule_id, f"{{type: github.pr_opened, repo: {HELLO}{filters}}}") + extra


def test_a_delivery_no_rule_matched_says_which_filter_refused_it_and_what_it_saw(
    session_factory: SessionFactory, sender: InMemorySender, rules_dir: Path
) -> None:
    # Given: before, such a delivery showed only `runs: [], error: null`
    add_rule(session_factory, rules_dir, "fix", pr_rule("agent-fix", ", labels: [agent-fix]"))
    add_rule(session_factory, rules_dir, "main", pr_rule("on-main", ", branches: [main]"))
    add_rule(session_factory, rules_dir, "off", pr_rule("switched-off", extra="enabled: false\n"))
    add_rule(session_factory, rules_dir, "cron", "id: nightly\ntriggers: [{type: schedule, "
             "cron: '0 3 * * *'}]\nexecution: {kind: built-in, actions: [{type: run-command, "
             "command: 'true'}]}\n")  # fmt: skip
    event_id = store_pr(session_factory, sender, "nothing-ran")

    # When
    status = match_ingress_event(session_factory, sender, event_id)

    # Then
    row = event_of(session_factory, event_id)
    assert status == IngressStatus.DISPATCHED and (row.runs, row.error) == ([], None)
    assert row.matching == {
        "rules": [
            {
                "rule": "agent-fix",
                "verdict": "refused",
                "trigger": 0,
                "filter": "labels",
                "reason": "missing label(s) agent-fix",
            },
            {
                "rule": "on-main",
                "verdict": "refused",
                "trigger": 0,
                "filter": "branches",
                "reason": "branch changes matches none of main",
            },
            {"rule": "switched-off", "verdict": "disabled"},
        ],
        "counts": {"refused": 2, "disabled": 1},
        "left_out": 0,
    }  # fmt: skip  (the schedule rule is no candidate of a pull request event)


def test_matched_paused_untrusted_and_skipped_rules_each_say_so(
    session_factory: SessionFactory, sender: InMemorySender, rules_dir: Path
) -> None:
    add_rule(session_factory, rules_dir, "ran", pr_rule("ran"))
    add_rule(session_factory, rules_dir, "held", pr_rule("held"))
    add_rule(session_factory, rules_dir, "shared", pr_rule("shared"))
    add_rule(session_factory, rules_dir, "full", pr_rule("full", extra="guardrails: "
             "{overlap: skip}\n"))  # fmt: skip
    with session_factory.begin() as session:
        pauses_db.pause(session, "held", None, "deploy freeze", "alice")
        session.execute(
            update(RuleRow)
            .where(RuleRow.id == "shared")
            .values(trust_state=UNTRUSTED, source_file="team.yaml", source_hash="ab" * 32)
        )
    busy = match_ingress_event(
        session_factory, sender, store_pr(session_factory, sender, "first")
    )  # leaves a queued run of `full` (and of `ran`)
    assert busy == IngressStatus.DISPATCHED

    event_id = store_pr(session_factory, sender, "second", title="Second")
    match_ingress_event(session_factory, sender, event_id)

    row = event_of(session_factory, event_id)
    found = {entry["rule"]: entry for entry in (row.matching or {})["rules"]}
    assert row.runs is not None and found["ran"]["verdict"] == "matched"
    assert found["ran"]["run"] in row.runs
    assert found["held"]["verdict"] == "paused"
    assert "paused by alice" in found["held"]["reason"]
    assert "deploy freeze" in found["held"]["reason"]
    assert found["shared"]["verdict"] == "untrusted"
    assert "rules trust " + "ab" * 32 in found["shared"]["reason"]
    assert found["full"]["verdict"] == "skipped" and found["full"]["run"] in row.runs
    assert found["full"]["reason"].startswith("skipped by the overlap policy skip")


def test_the_stored_verdicts_are_capped_keeping_the_rule_that_ran_and_counting_the_rest(
    session_factory: SessionFactory, sender: InMemorySender, rules_dir: Path
) -> None:
    for n in range(verdicts.MAX_SHOWN + 5):
        add_rule(session_factory, rules_dir, f"r{n:03d}", pr_rule(f"r{n:03d}", ", draft: true"))
    add_rule(session_factory, rules_dir, "zz", pr_rule("zz-runs"))
    event_id = store_pr(session_factory, sender, "many")

    match_ingress_event(session_factory, sender, event_id)

    matching = event_of(session_factory, event_id).matching
    assert matching is not None
    assert len(matching["rules"]) == verdicts.MAX_SHOWN
    assert matching["rules"][0]["rule"] == "zz-runs"  # the rule that ran comes first
    assert matching["counts"] == {"matched": 1, "refused": verdicts.MAX_SHOWN + 5}
    assert matching["left_out"] == 6
    assert matching["rules"][1]["reason"] == "draft is False, wanted True"


def test_a_held_delivery_says_it_is_held_by_the_kill_switch_and_is_matched_later(
    session_factory: SessionFactory, sender: InMemorySender, rules_dir: Path
) -> None:
    add_rule(session_factory, rules_dir, "pr", pr_rule("pr"))
    event_id = store_pr(session_factory, sender, "held")

    match_ingress_event(session_factory, sender, event_id, automations_disabled=True)

    held = event_of(session_factory, event_id)
    assert held.status == IngressStatus.RECEIVED and held.attempts == 0
    assert held.matching is not None
    assert held.matching["held"].startswith("held: automations are disabled on this cluster")
    match_ingress_event(session_factory, sender, event_id)
    matched = event_of(session_factory, event_id).matching
    assert matched is not None and [e["verdict"] for e in matched["rules"]] == ["matched"]


def test_an_event_no_rule_has_a_trigger_for_says_so(
    session_factory: SessionFactory, sender: InMemorySender, rules_dir: Path
) -> None:
    add_rule(session_factory, rules_dir, "push", rule("push", "{type: git.push}"))
    event_id = store_pr(session_factory, sender, "lonely")

    match_ingress_event(session_factory, sender, event_id)

    assert event_of(session_factory, event_id).matching == {
        "rules": [],
        "counts": {},
        "left_out": 0,
        "note": "no enabled rule has a trigger of type github.pr_opened",
    }
