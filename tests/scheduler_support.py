"""Helpers for scheduler tests: a clock the test moves, and rules that fire every minute."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from ade_tasks.db.engine import SessionFactory
from ade_tasks.rule_files.sync import sync_rules_dir

START = datetime(2026, 11, 30, 10, 0, 5, tzinfo=UTC)


class FakeClock:
    """Now, as the test says; `skew` shifts one beat's view of it."""

    def __init__(self, now: datetime = START, skew: timedelta = timedelta(0)) -> None:
        self.now = now
        self.skew = skew

    def __call__(self) -> datetime:
        return self.now + self.skew

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


def write_minutely_rules(
    session_factory: SessionFactory,
    rules_dir: Path,
    count: int,
    extra: str = "",
    overlap: str = "allow-all",
) -> list[str]:
    """`count` enabled rules firing every minute, synced; returns their ids.

    Their overlap policy is allow-all unless `overlap` says otherwise: most of these tests run
    no worker, so under the schedule default (skip) every slot after the first would be skipped.
    """
    rules_dir.mkdir(parents=True, exist_ok=True)
    documents = []
    for n in range(count):
        documents.append(
            f"- id: every-minute-{n:04d}\n"
            "  triggers: [{type: schedule, cron: '* * * * *'" + extra + "}]\n"
            "  execution: {kind: built-in, actions: [{type: run-command, command: 'true'}]}\n"
            f"  guardrails: {{overlap: {overlap}}}\n"
        )
    (rules_dir / "minutely.yaml").write_text("".join(documents))
    loaded, _ = sync_rules_dir(session_factory, rules_dir)
    assert not loaded.problems, loaded.problems[:3]
    return [f"every-minute-{n:04d}" for n in range(count)]
