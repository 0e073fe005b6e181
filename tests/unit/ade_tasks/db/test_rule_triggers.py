"""Event matching reads the rules the index says can match, not every rule: on SQLite, a webhook
event among many schedule rules validates only the webhook rules of its hook, sees edits, leaves
out disabled rules, and logs (and leaves out) a stored rule it cannot read without holding back
the others."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from sqlalchemy import update

from ade_tasks.db import rule_triggers
from ade_tasks.db import rules as rules_db
from ade_tasks.db.engine import SessionFactory
from ade_tasks.db.schema import RuleRow
from ade_tasks.ingress.poller import GithubPoller
from ade_tasks.rule_files.sync import sync_rules_dir
from ade_tasks.rules.rule import Rule
from ade_tasks.rules.triggers import Trigger
from ade_tasks.triggers.local_events import matching_rules
from ade_tasks.triggers.matcher import Refusal, TriggerTest
from tests.conftest import write_rule

BUILT_IN = "execution: {kind: built-in, actions: [{type: run-command, command: 'true'}]}"


def cron_rule(n: int) -> str:
    return f"id: cron-{n}\ntriggers: [{{type: schedule, cron: '{n % 60} * * * *'}}]\n{BUILT_IN}\n"


def hook_rule(rule_id: str, hook: str, *, enabled: bool = True) -> str:
    return (
        f"id: {rule_id}\nenabled: {str(enabled).lower()}\n"
        f"triggers: [{{type: manual}}, {{type: webhook, hook: {hook}}}]\n{BUILT_IN}\n"
    )


@pytest.fixture
def fresh_caches(monkeypatch: pytest.MonkeyPatch) -> dict[str, object]:
    """This process has parsed no rule yet (as a new worker)."""
    parsed: dict[str, object] = {}
    monkeypatch.setattr(rules_db, "_PARSED", parsed)
    return parsed


@pytest.fixture
def many_rules(session_factory: SessionFactory, rules_dir: Path) -> SessionFactory:
    for n in range(200):
        write_rule(rules_dir, f"cron-{n}.yaml", cron_rule(n))
    write_rule(rules_dir, "ci.yaml", hook_rule("on-ci", "ci"))
    write_rule(rules_dir, "deploy.yaml", hook_rule("on-deploy", "deploy"))
    write_rule(rules_dir, "off.yaml", hook_rule("switched-off", "ci", enabled=False))
    loaded, _ = sync_rules_dir(session_factory, rules_dir)
    assert not loaded.problems, loaded.problems
    return session_factory


def hook_is(name: str) -> TriggerTest:
    def test(_rule: Rule, trigger: Trigger) -> Refusal | None:
        return None if getattr(trigger, "hook", None) == name else Refusal("hook", "other hook")

    return test


def test_a_webhook_event_validates_only_the_rules_with_a_webhook_trigger(
    many_rules: SessionFactory, fresh_caches: dict[str, object]
) -> None:
    found = matching_rules(many_rules, "webhook", hook_is("ci"))

    assert found == {"on-ci": (1,)}
    # The 200 schedule rules were never validated for it, nor the disabled one.
    assert len(fresh_caches) == 2
    with many_rules() as session:
        validated = {rule.id for rule in rule_triggers.rules_with_trigger(session, "webhook")}
    assert validated == {"on-ci", "on-deploy"}
    assert len(fresh_caches) == 2


def test_an_event_carrying_a_key_validates_only_the_rules_indexed_under_it(
    many_rules: SessionFactory, fresh_caches: dict[str, object]
) -> None:
    found = matching_rules(many_rules, "webhook", hook_is("ci"), keys=["ci"])

    assert found == {"on-ci": (1,)}
    assert len(fresh_caches) == 1  # on-deploy's hook is another: never read
    with many_rules() as session:
        enabled, disabled = rule_triggers.trigger_candidates(session, "webhook", ["CI"])
    assert ([rule.id for rule in enabled], disabled) == (["on-ci"], ["switched-off"])


def test_an_edited_rule_is_matched_by_its_new_triggers(
    many_rules: SessionFactory, rules_dir: Path, fresh_caches: dict[str, object]
) -> None:
    assert matching_rules(many_rules, "webhook", hook_is("release")) == {}
    write_rule(rules_dir, "deploy.yaml", hook_rule("on-deploy", "release"))
    _, report = sync_rules_dir(many_rules, rules_dir)
    assert report.updated == ["on-deploy"]

    assert matching_rules(many_rules, "webhook", hook_is("release")) == {"on-deploy": (1,)}


def test_a_stored_rule_that_cannot_be_read_is_logged_and_the_others_still_match(
    many_rules: SessionFactory, fresh_caches: dict[str, object], caplog: pytest.LogCaptureFixture
) -> None:
    # As a newer version might have stored them (keeping the index rows the old documents had:
    # cron-1 stays a schedule, so no webhook event reads it).
    with many_rules.begin() as session:
        session.execute(
            update(RuleRow)
            .where(RuleRow.id == "on-deploy")
            .values(document={"id": "on-deploy", "triggers": [{"type": "webhook", "hook": 7}]})
        )
        session.execute(
            update(RuleRow)
            .where(RuleRow.id == "cron-1")
            .values(content_hash="odd", document={"id": "cron-1", "triggers": "not a list"})
        )

    with caplog.at_level(logging.WARNING, logger="ade_tasks.db.rule_triggers"):
        found = matching_rules(many_rules, "webhook", lambda _rule, _trigger: None)

    assert found == {"on-ci": (1,)}
    warned = {record.getMessage().split(" is left out")[0] for record in caplog.records}
    assert warned == {"rule on-deploy"}


def test_the_github_poller_validates_only_the_rules_with_a_github_trigger(
    many_rules: SessionFactory, rules_dir: Path, fresh_caches: dict[str, object]
) -> None:
    write_rule(
        rules_dir,
        "review.yaml",
        f"id: on-pr\ntriggers: [{{type: github.pr_opened, repo: acme/app}}]\n{BUILT_IN}\n",
    )
    sync_rules_dir(many_rules, rules_dir)
    fresh_caches.clear()
    poller = GithubPoller(many_rules, sender=None, client=None)  # type: ignore[arg-type]

    repos, idle = poller._targets()

    assert (repos, idle) == (["acme/app"], None)
    # The 200 schedule rules and the webhook rules were never validated for it.
    assert len(fresh_caches) == 1
