"""The event-matching index on PostgreSQL: the unit tests of its writes and lookups
(`tests/unit/ade_tasks/db/test_rule_index.py`, `test_rule_triggers.py`) run here, and the fault
from issue 39: 10,000 rules added, disabled and removed at once, each in one sync, while events
arrive. No event misses a rule that matches it throughout its lookup, and none matches a rule
deleted or disabled throughout it."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from ade_tasks.db import rule_triggers
from ade_tasks.db.engine import SessionFactory, create_db_engine, create_session_factory
from ade_tasks.db.rule_sync import sync_file_rules
from ade_tasks.rules.loader import LoadedRule, content_hash
from ade_tasks.rules.rule import Rule
from ade_tasks.triggers.local_events import matching_rules
from ade_tasks.triggers.registry import event_keys, trigger_test
from tests.unit.ade_tasks.db.test_rule_index import (  # noqa: F401 (the tests, run here)
    test_a_push_writes_the_keys_of_the_rules_it_applies,
    test_a_sync_writes_changes_and_removes_the_keys_of_its_rules,
    test_api_edits_keep_the_keys_and_disabling_writes_none,
)
from tests.unit.ade_tasks.db.test_rule_triggers import (  # noqa: F401 (the tests and fixtures)
    fresh_caches,
    many_rules,
    test_a_webhook_event_validates_only_the_rules_with_a_webhook_trigger,
    test_an_edited_rule_is_matched_by_its_new_triggers,
    test_an_event_carrying_a_key_validates_only_the_rules_indexed_under_it,
)

CHURN = 10_000
CYCLES = 1
DEADLINE_SECONDS = 90.0  # the whole fault; about 12 s on the 2-core development machine
HOOK = "h"


@pytest.fixture
def session_factory(database_url: str) -> Iterator[SessionFactory]:
    engine = create_db_engine(database_url)
    yield create_session_factory(engine)
    engine.dispose()


@pytest.fixture
def rules_dir(tmp_path: Path) -> Path:
    return tmp_path / "rules"


def loaded(rule_id: str, hook: str, *, enabled: bool = True) -> LoadedRule:
    document = Rule.model_validate(
        {
            "id": rule_id,
            "enabled": enabled,
            "triggers": [{"type": "webhook", "hook": hook}],
            "execution": {
                "kind": "built-in",
                "actions": [{"type": "run-command", "command": "true"}],
            },
        }
    ).document()
    return LoadedRule(
        rule_id, f"/rules/{rule_id}.yaml", content_hash(document), None, document, enabled
    )


@dataclass(frozen=True)
class State:
    """What the churned rules are between two syncs (`settled`), or that a sync is under way."""

    churn: str  # "enabled", "disabled", "absent"
    settled: bool


def test_10000_rules_added_disabled_and_removed_at_once_while_events_arrive(
    session_factory: SessionFactory,
) -> None:
    # Given rules that never change: on the event's hook (enabled and disabled) and on another
    base = [loaded(f"on-{n}", HOOK) for n in range(20)]
    base += [loaded(f"off-{n}", HOOK, enabled=False) for n in range(20)]
    base += [loaded(f"other-{n}", "other") for n in range(20)]
    churn = {
        on: [loaded(f"churn-{n:05d}", HOOK, enabled=on) for n in range(CHURN)] for on in (1, 0)
    }
    with session_factory.begin() as session:
        sync_file_rules(session, base, remove_missing=True)
    must_match = {rule.rule_id for rule in base[:20]}
    never = {rule.rule_id for rule in base[20:]}
    churned = {rule.rule_id for rule in churn[1]}
    state = State("absent", settled=True)
    done = threading.Event()
    failures: list[str] = []
    seen: dict[str, int] = {"enabled": 0, "disabled": 0, "absent": 0}
    counting = threading.Lock()

    def churner() -> None:
        nonlocal state
        try:
            for _ in range(CYCLES):
                for name, rules in (("enabled", churn[1]), ("disabled", churn[0]), ("absent", [])):
                    state = State(state.churn, settled=False)
                    with session_factory.begin() as session:
                        sync_file_rules(session, base + rules, remove_missing=True)
                    target = seen[name] + 2
                    state = State(name, settled=True)
                    # both event threads look at the settled state before the next sync
                    deadline = time.monotonic() + 20
                    while seen[name] < target and time.monotonic() < deadline and not failures:
                        time.sleep(0.01)
        except Exception as exc:  # the test fails with it below
            failures.append(f"churn: {exc!r}")
        finally:
            done.set()

    def events() -> None:
        keys = event_keys(f"webhook:{HOOK}", ["webhook"], {})
        match = trigger_test(f"webhook:{HOOK}", "webhook", {"body": {}})
        while not done.is_set():
            before = state
            found = set(matching_rules(session_factory, "webhook", match, keys=keys))
            with session_factory() as session:
                _, disabled = rule_triggers.trigger_candidates(session, "webhook", keys)
            after = state
            if missed := must_match - found:
                failures.append(f"missed {sorted(missed)[:3]}")
            if wrong := (found & never) | (set(disabled) & must_match):
                failures.append(f"matched deleted, disabled or other rules {sorted(wrong)[:3]}")
            if before is after and before.settled:
                with counting:
                    seen[before.churn] += 1
                want = churned if before.churn == "enabled" else set()
                if found & churned != want:
                    failures.append(
                        f"{len(found & churned)} churned rules matched while {before.churn}"
                    )
                want_off = churned if before.churn == "disabled" else set()
                if set(disabled) & churned != want_off:
                    failures.append(f"disabled list wrong while {before.churn}")

    # When two event threads match while one thread syncs
    threads = [threading.Thread(target=churner)] + [
        threading.Thread(target=events) for _ in range(2)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=DEADLINE_SECONDS)
    done.set()

    # Then every lookup saw the rules as they were, and each state was looked at settled
    assert not any(thread.is_alive() for thread in threads), "the fault did not end in time"
    assert failures == []
    assert all(count > 0 for count in seen.values()), seen
