"""Ingress events on SQLite: a poison event never blocks the next, duplicates store nothing,
and the table stays within its bounds as events are written."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import func, select, update

from ade_tasks.clock import utcnow
from ade_tasks.db import ingress as ingress_db
from ade_tasks.db.engine import SessionFactory
from ade_tasks.db.schema import IngressEventRow, RunRow
from ade_tasks.ingress import intake
from ade_tasks.ingress.event import NormalizedEvent
from ade_tasks.ingress.github import normalize
from ade_tasks.runs.dispatch import dispatch
from ade_tasks.runs.trigger_events import TriggerEvent
from ade_tasks.states import IngressStatus
from ade_tasks.testing import InMemorySender
from ade_tasks.triggers.ingress_events import match_ingress_event
from ade_workers.engine.runner import execute_run
from ade_workers.engine.runner_config import RunnerConfig
from tests.fixtures import GITHUB_FIXTURES
from tests.unit.conftest import add_rule

RULE = """
id: reviewer
triggers: [{type: github.pr_opened, repo: Codertocat/Hello-World}]
execution: {kind: built-in, actions: [{type: run-command, command: "true"}]}
"""


def store(session_factory: SessionFactory, sender: InMemorySender, delivery: str) -> int | None:
    body = (GITHUB_FIXTURES / "pull_request/opened.payload.json").read_bytes()
    event = normalize("pull_request", delivery, json.loads(body))
    row = intake.event_row(
        source="github",
        delivery_id=delivery,
        event=event,
        event_key=event.event_key,
        payload=event.to_payload(),
        digest=intake.body_hash(body + delivery.encode()),
    )
    return intake.store_event(session_factory, sender, row).event_id


def test_an_event_that_cannot_be_dispatched_is_recorded_failed_and_the_next_one_runs(
    session_factory: SessionFactory, rules_dir: Path
) -> None:
    add_rule(session_factory, rules_dir, "reviewer", RULE)
    sender = InMemorySender()
    poison = store(session_factory, sender, "poison")
    healthy = store(session_factory, sender, "healthy")
    assert poison is not None and healthy is not None
    with session_factory.begin() as session:  # a payload this version cannot read
        session.execute(
            update(IngressEventRow).where(IngressEventRow.id == poison).values(payload={"x": 1})
        )

    first = match_ingress_event(session_factory, sender, poison)
    second = match_ingress_event(session_factory, sender, healthy)

    with session_factory() as session:
        failed = ingress_db.get_event(session, poison)
        done = ingress_db.get_event(session, healthy)
        runs = session.scalars(select(RunRow.rule_id)).all()
    assert (first, second) == (IngressStatus.FAILED, IngressStatus.DISPATCHED)
    assert failed is not None and "matching or dispatching failed" in (failed.error or "")
    assert done is not None and done.runs is not None and len(done.runs) == 1
    assert runs == ["reviewer"]
    assert sender.ingress == [poison, healthy]


def test_dispatching_an_event_twice_starts_its_runs_once(
    session_factory: SessionFactory, rules_dir: Path
) -> None:
    add_rule(session_factory, rules_dir, "reviewer", RULE)
    sender = InMemorySender()
    event_id = store(session_factory, sender, "once")
    assert event_id is not None

    match_ingress_event(session_factory, sender, event_id)
    again = match_ingress_event(session_factory, sender, event_id)

    assert again is None
    assert len(sender.sent) == 1


def test_the_same_delivery_id_stores_nothing_the_second_time(
    session_factory: SessionFactory,
) -> None:
    sender = InMemorySender()
    assert store(session_factory, sender, "d-1") is not None
    assert store(session_factory, sender, "d-1") is None
    assert sender.ingress == [1]


def test_writes_keep_the_table_within_its_bounds(
    session_factory: SessionFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ingress_db, "KEEP_UNDISPATCHED", 20)
    monkeypatch.setattr(ingress_db, "HARD_CAP", 50)
    monkeypatch.setattr(ingress_db, "PRUNE_EVERY", 10)
    sender = InMemorySender()
    for n in range(30):
        store(session_factory, sender, f"old-{n}")
    with session_factory.begin() as session:  # a week and a day ago, and dispatched
        session.execute(
            update(IngressEventRow).values(
                received_at=utcnow() - timedelta(days=8), status=IngressStatus.DISPATCHED
            )
        )
    for n in range(60):
        store(session_factory, sender, f"new-{n}")

    with session_factory() as session:
        rows = session.execute(
            select(IngressEventRow.status, func.count()).group_by(IngressEventRow.status)
        ).all()
        oldest = session.scalar(select(func.min(IngressEventRow.received_at)))
    counts = dict(rows)
    assert counts == {"received": 20}  # old ones aged out; the newest 20 waiting kept
    assert oldest is not None and oldest > utcnow() - timedelta(days=7)


def test_handing_over_sends_one_message_then_applies_the_bounds_when_an_event_calls_for_it(
    session_factory: SessionFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given an event a week and a day old, and the broker down
    monkeypatch.setattr(ingress_db, "PRUNE_EVERY", 10)
    sender = InMemorySender()
    old = store(session_factory, sender, "old")
    with session_factory.begin() as session:
        session.execute(update(IngressEventRow).values(received_at=utcnow() - timedelta(days=8)))
    sender.down = True
    # When events are handed over, the tenth among them
    assert intake.hand_over(session_factory, sender, [9]) is False
    with session_factory() as session:
        assert session.get(IngressEventRow, old) is not None  # no event called for the bounds
    sender.down = False
    assert intake.hand_over(session_factory, sender, [10, 11]) is True
    # Then they were sent, and the bounds were applied
    assert sender.ingress == [old, 10, 11]
    with session_factory() as session:
        assert session.get(IngressEventRow, old) is None


def test_the_hard_cap_holds_however_many_events_were_dispatched(
    session_factory: SessionFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ingress_db, "HARD_CAP", 25)
    sender = InMemorySender()
    for n in range(40):
        store(session_factory, sender, f"e-{n}")
    with session_factory.begin() as session:
        session.execute(update(IngressEventRow).values(status=IngressStatus.DISPATCHED))

    with session_factory.begin() as session:
        dropped = ingress_db.prune(session, utcnow())

    with session_factory() as session:
        kept = session.scalars(select(IngressEventRow.delivery_id).order_by(IngressEventRow.id))
        kept_ids = list(kept)
    assert dropped == 15 and kept_ids == [f"e-{n}" for n in range(15, 40)]


def test_a_merged_pull_request_from_a_lane_branch_fires_lane_merged_once(
    session_factory: SessionFactory, rules_dir: Path, config: RunnerConfig
) -> None:
    add_rule(session_factory, rules_dir, "make-lane", """
id: make-lane
triggers: [{type: manual}]
execution: {kind: built-in, actions: [{type: create-lane, name: fix-login, base: main}]}
""")  # fmt: skip
    add_rule(session_factory, rules_dir, "on-merge", """
id: on-merge
triggers: [{type: lane.merged, lanes: ["fix-*"]}]
execution: {kind: built-in, actions: [{type: run-command, command: "true"}]}
""")  # fmt: skip
    sender = InMemorySender()
    run_id = dispatch(session_factory, sender, "make-lane", TriggerEvent.manual()).run.id
    execute_run(session_factory, config, run_id, "w1")

    for delivery in ("merged-1", "merged-again"):  # the same PR's merge seen twice
        merged = NormalizedEvent(
            source="github", delivery_id=delivery, event_key="pull_request.closed",
            trigger_type="github.pr_merged", repo="acme/api", number=7, branch="ade/fix-login",
            merged=True,
        )  # fmt: skip
        row = intake.event_row(
            source="github", delivery_id=delivery, event=merged,
            event_key=merged.event_key, payload=merged.to_payload(), digest=None,
        )  # fmt: skip
        event_id = intake.store_event(session_factory, sender, row).event_id
        assert event_id is not None
        match_ingress_event(session_factory, sender, event_id)

    with session_factory() as session:
        merges = session.scalars(select(RunRow).where(RunRow.trigger_type == "lane.merged")).all()
    assert [(run.rule_id, run.trigger["lane"]["name"]) for run in merges] == [
        ("on-merge", "fix-login")
    ]
