"""Concurrency keys (`concurrency: {key, on_new}`), enforced in dispatch per rule and key: queue,
skip and supersede, the batch's own runs, and keys that cannot render. On SQLite here; the same
tests run on PostgreSQL in tests/integration/test_concurrency_keys_pg.py."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import pytest
import yaml

from ade_api.http.schemas.runs import RunOut
from ade_tasks.clock import utcnow
from ade_tasks.db import run_events as run_events_db
from ade_tasks.db import runs as runs_db
from ade_tasks.db.engine import SessionFactory
from ade_tasks.errors import AdmissionError
from ade_tasks.ingress.event import NormalizedEvent
from ade_tasks.rules.loader import parse_rule
from ade_tasks.rules.rule import Rule
from ade_tasks.runs.dispatch import dispatch, dispatch_many
from ade_tasks.runs.recovery import recover
from ade_tasks.runs.trigger_events import TriggerEvent
from ade_tasks.settings import Settings
from ade_tasks.states import RunStatus
from ade_tasks.testing import InMemorySender
from ade_workers.actions.registry import registry
from ade_workers.engine.runner import execute_run
from ade_workers.engine.runner_config import RunnerConfig
from tests.unit.conftest import add_rule

KEY = "pr-{{trigger.repo}}#{{trigger.number}}"


def keyed_rule(session_factory: SessionFactory, rules_dir: Path, on_new: str) -> None:
    add_rule(
        session_factory,
        rules_dir,
        "fix",
        "id: fix\n"
        "triggers: [{type: github.pr_updated}, {type: manual}, {type: schedule, cron: '0 * * * *'}]\n"
        "execution: {kind: built-in, actions: [{type: run-command, command: 'true'}]}\n"
        f"concurrency: {{key: '{KEY}', on_new: {on_new}}}\n",
    )


def pushed(number: int | None, delivery: str, sha: str = "abc") -> TriggerEvent:
    """A `pull_request.synchronize` delivery as the GitHub ingress stores it."""
    event = NormalizedEvent(
        source="github", delivery_id=delivery, event_key="pull_request.synchronize",
        trigger_type="github.pr_updated", repo="acme/api", number=number, branch="fix-1",
        head_sha=sha,
        summary=f"PR #{number} updated",
    )  # fmt: skip
    return TriggerEvent("github.pr_updated", event.summary, event.to_payload(), delivery)


def fire(session_factory: SessionFactory, sender: InMemorySender, event: TriggerEvent) -> str:
    return dispatch(session_factory, sender, "fix", event).run.id


def row(session_factory: SessionFactory, run_id: str) -> tuple[str, bool, str | None, str | None]:
    with session_factory() as session:
        run = runs_db.get_run(session, run_id)
        return run.status, run.buffered, run.error, run.concurrency_key


def start(session_factory: SessionFactory, run_id: str) -> None:
    with session_factory.begin() as session:
        assert runs_db.claim_run(session, run_id, "w", utcnow() + timedelta(minutes=1))


def test_the_key_is_rendered_from_the_trigger_and_stored_on_the_run(
    session_factory: SessionFactory, rules_dir: Path, sender: InMemorySender
) -> None:
    keyed_rule(session_factory, rules_dir, "queue")
    run_id = fire(session_factory, sender, pushed(7, "d1"))
    assert row(session_factory, run_id) == ("queued", False, None, "pr-acme/api#7")


def test_queue_holds_a_second_run_of_the_key_until_the_first_ends_and_other_keys_run(
    session_factory: SessionFactory, rules_dir: Path, sender: InMemorySender, tmp_path: Path
) -> None:
    keyed_rule(session_factory, rules_dir, "queue")
    first = fire(session_factory, sender, pushed(7, "d1"))
    second = fire(session_factory, sender, pushed(7, "d2"))
    other = fire(session_factory, sender, pushed(8, "d3"))
    assert row(session_factory, second)[:2] == ("queued", True)
    assert [s[0] for s in sender.sent] == [first, other]
    # When the first run ends, its worker starts the key's next run
    config = RunnerConfig(Settings(projects={"default": tmp_path}), registry(), {}, sender=sender)
    assert execute_run(session_factory, config, first, "w") == RunStatus.SUCCEEDED
    assert [s[0] for s in sender.sent] == [first, other, second]
    assert row(session_factory, second)[:2] == ("queued", False)


def test_skip_records_the_new_run_skipped_naming_the_run_that_holds_the_key(
    session_factory: SessionFactory, rules_dir: Path, sender: InMemorySender
) -> None:
    keyed_rule(session_factory, rules_dir, "skip")
    first = fire(session_factory, sender, pushed(7, "d1"))
    start(session_factory, first)
    second = fire(session_factory, sender, pushed(7, "d2"))
    assert row(session_factory, second)[:3] == (
        "skipped",
        False,
        f"skipped by concurrency.on_new skip: run {first} with key 'pr-acme/api#7' is running",
    )
    assert row(session_factory, fire(session_factory, sender, pushed(8, "d3")))[0] == "queued"


def test_supersede_cancels_a_run_still_queued_and_starts_the_new_one(
    session_factory: SessionFactory, rules_dir: Path, sender: InMemorySender
) -> None:
    keyed_rule(session_factory, rules_dir, "supersede")
    first = fire(session_factory, sender, pushed(7, "d1"))
    other = fire(session_factory, sender, pushed(8, "d2"))
    second = fire(session_factory, sender, pushed(7, "d3"))
    assert row(session_factory, first)[:3] == ("cancelled", False, f"superseded by run {second}")
    assert row(session_factory, second)[:2] == ("queued", False)
    assert row(session_factory, other)[0] == "queued"  # another key: untouched
    assert [s[0] for s in sender.sent] == [first, other, second]
    with session_factory() as session:
        (cancelled,) = run_events_db.events_of(session, first, "run.cancelled")
    assert cancelled[1]["by"] == f"run {second}" and cancelled[1]["was"] == "queued"


def test_supersede_cancels_a_running_run_which_can_no_longer_record_an_outcome(
    session_factory: SessionFactory, rules_dir: Path, sender: InMemorySender
) -> None:
    keyed_rule(session_factory, rules_dir, "supersede")
    first = fire(session_factory, sender, pushed(7, "d1"))
    start(session_factory, first)
    second = fire(session_factory, sender, pushed(7, "d2"))
    assert row(session_factory, first)[:3] == ("cancelled", False, f"superseded by run {second}")
    with session_factory.begin() as session:
        assert runs_db.is_cancelled(session, first)
        assert not runs_db.finish_run(session, first, "w", RunStatus.SUCCEEDED)


def test_supersede_within_one_batch_leaves_exactly_one_run(
    session_factory: SessionFactory, rules_dir: Path, sender: InMemorySender
) -> None:
    keyed_rule(session_factory, rules_dir, "supersede")
    results = dispatch_many(
        session_factory, sender, [("fix", pushed(7, f"d{n}")) for n in range(3)] + [
            ("fix", pushed(8, "other"))]
    )  # fmt: skip
    ids = [r.run.id for r in results if not isinstance(r, Exception)]
    states = [row(session_factory, run_id) for run_id in ids]
    assert [s[0] for s in states] == ["skipped", "skipped", "queued", "queued"]
    assert [s[2] for s in states[:2]] == [
        f"superseded by run {ids[n + 1]} before it started" for n in range(2)
    ]
    assert [s[0] for s in sender.sent] == ids[2:]


@pytest.mark.parametrize(
    ("event", "why"),
    [
        (TriggerEvent.manual(), "unknown variable trigger.repo"),
        ("no number", r"renders empty for this trigger \(trigger.number is empty\)"),
    ],
)
def test_a_key_that_cannot_render_refuses_the_trigger_and_records_no_run(
    session_factory: SessionFactory,
    rules_dir: Path,
    sender: InMemorySender,
    event: TriggerEvent | str,
    why: str,
) -> None:
    keyed_rule(session_factory, rules_dir, "supersede")
    trigger = pushed(None, "d1") if event == "no number" else event
    assert isinstance(trigger, TriggerEvent)
    with pytest.raises(AdmissionError, match=f"rule 'fix': concurrency.key .*{why}"):
        fire(session_factory, sender, trigger)
    with session_factory() as session:
        assert runs_db.runs_by_keys(session, ["d1"]) == {}
    assert sender.sent == []


def test_the_sweep_releases_a_queued_run_whose_key_holder_was_lost(
    session_factory: SessionFactory, rules_dir: Path, sender: InMemorySender
) -> None:
    keyed_rule(session_factory, rules_dir, "queue")
    first = fire(session_factory, sender, pushed(7, "d1"))
    second = fire(session_factory, sender, pushed(7, "d2"))
    start(session_factory, first)
    with session_factory.begin() as session:  # its worker died after the run ended
        assert runs_db.finish_run(session, first, "w", RunStatus.SUCCEEDED)
    report = recover(session_factory, sender, requeue_after=timedelta(hours=1))
    assert report.released == [second]


def parsed(extra: str) -> Rule | list[str]:
    document = {
        "id": "fix",
        "triggers": [{"type": "github.pr_updated"}],
        "execution": {"kind": "built-in", "actions": [{"type": "run-command", "command": "true"}]},
        **extra_document(extra),
    }
    result = parse_rule(document, "rules/fix.yaml")
    return result if isinstance(result, Rule) else [str(p) for p in result]


def extra_document(extra: str) -> dict[str, object]:
    loaded = yaml.safe_load(extra)
    assert isinstance(loaded, dict)
    return loaded


@pytest.mark.parametrize(
    ("extra", "problem"),
    [
        (
            "{concurrency: {key: 'pr-{{trigger.number}}'}, guardrails: {overlap: skip}}",
            "concurrency and guardrails.overlap both say",
        ),
        ("{concurrency: {key: '{{steps.a.output}}'}}", "not known when the run is dispatched"),
        ("{concurrency: {key: 'pr-{{trigger.number'}}", "malformed template"),
        ("{concurrency: {key: 'pr', on_new: cancel}}", "queue"),
    ],
)
def test_bad_concurrency_settings_are_refused_at_validation(extra: str, problem: str) -> None:
    problems = parsed(extra)
    assert isinstance(problems, list) and any(problem in p for p in problems), problems


def test_a_key_with_max_concurrent_validates_and_defaults_to_queue() -> None:
    rule = parsed("{concurrency: {key: 'pr-{{trigger.number}}'}, guardrails: {max_concurrent: 3}}")
    assert isinstance(rule, Rule) and rule.concurrency is not None
    assert rule.concurrency.on_new == "queue"


def test_the_api_shows_a_runs_key(
    session_factory: SessionFactory, rules_dir: Path, sender: InMemorySender
) -> None:
    keyed_rule(session_factory, rules_dir, "queue")
    fire(session_factory, sender, pushed(7, "d1"))
    held = fire(session_factory, sender, pushed(7, "d2"))
    with session_factory() as session:
        shown = RunOut.of(runs_db.get_run(session, held)).model_dump()
    assert (shown["concurrency_key"], shown["buffered"]) == ("pr-acme/api#7", True)


def test_the_docs_example_of_a_keyed_rule_validates() -> None:
    doc = Path(__file__).resolve().parents[4] / "docs" / "guardrails.md"
    blocks = [
        b for b in re.findall(r"```yaml\n(.*?)```", doc.read_text(), re.S) if "concurrency:" in b
    ]
    assert blocks
    for block in blocks:
        parsed = parse_rule(yaml.safe_load(block), "docs/guardrails.md")
        assert isinstance(parsed, Rule), [str(p) for p in parsed]
        assert parsed.concurrency is not None and parsed.concurrency.on_new == "supersede"
