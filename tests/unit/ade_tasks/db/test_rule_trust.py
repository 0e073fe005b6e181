"""Shared-config trust: rules from files under `shared/` run only once an admin trusted the
file's content, and editing the file revokes that trust."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from ade_tasks.db import rule_trust as rule_trust_db
from ade_tasks.db import rules as rules_db
from ade_tasks.db.engine import SessionFactory
from ade_tasks.errors import AdmissionError, NotFoundError
from ade_tasks.rule_files.sync import sync_rules_dir
from ade_tasks.runs.dispatch import dispatch
from ade_tasks.runs.trigger_events import TriggerEvent
from ade_tasks.states import RunStatus
from ade_tasks.testing import InMemorySender
from ade_workers.engine.runner import execute_run
from ade_workers.engine.runner_config import RunnerConfig
from tests.conftest import write_rule

RULE = """
id: {id}
triggers: [{{type: manual}}]
execution: {{kind: built-in, actions: [{{type: run-command, command: "{command}"}}]}}
"""


def sync(session_factory: SessionFactory, rules_dir: Path) -> None:
    loaded, _ = sync_rules_dir(session_factory, rules_dir)
    assert not loaded.problems, loaded.problems


def test_rules_from_a_shared_file_run_only_after_its_hash_is_trusted(
    session_factory: SessionFactory, rules_dir: Path
) -> None:
    shared = write_rule(rules_dir / "shared", "team.yaml", RULE.format(id="team", command="true"))
    write_rule(rules_dir, "own.yaml", RULE.format(id="own", command="true"))
    sync(session_factory, rules_dir)
    file_hash = hashlib.sha256(shared.read_bytes()).hexdigest()

    with pytest.raises(AdmissionError, match=f"rules trust {file_hash}"):
        dispatch(session_factory, InMemorySender(), "team", TriggerEvent.manual())
    assert dispatch(session_factory, InMemorySender(), "own", TriggerEvent.manual()).created

    with session_factory.begin() as session:
        assert rule_trust_db.trust_hash(session, file_hash, "admin") == ["team"]
    assert dispatch(session_factory, InMemorySender(), "team", TriggerEvent.manual()).created


def test_editing_a_trusted_shared_file_revokes_the_trust(
    session_factory: SessionFactory, rules_dir: Path
) -> None:
    shared = write_rule(rules_dir / "shared", "team.yaml", RULE.format(id="team", command="true"))
    sync(session_factory, rules_dir)
    with session_factory.begin() as session:
        rule_trust_db.trust_hash(session, hashlib.sha256(shared.read_bytes()).hexdigest(), "admin")

    write_rule(rules_dir / "shared", "team.yaml", RULE.format(id="team", command="curl evil"))
    sync(session_factory, rules_dir)

    with session_factory() as session:
        snapshot = rules_db.rule_snapshot(session, "team")
    assert snapshot.trust_state == "untrusted"
    with pytest.raises(AdmissionError, match="which no admin has trusted"):
        dispatch(session_factory, InMemorySender(), "team", TriggerEvent.manual())


def test_trusting_an_unknown_hash_is_refused(session_factory: SessionFactory) -> None:
    with pytest.raises(NotFoundError, match="no synced rule comes from"):
        with session_factory.begin() as session:
            rule_trust_db.trust_hash(session, "0" * 64, "admin")


def test_a_run_queued_before_its_shared_file_changed_does_not_run_the_new_content(
    session_factory: SessionFactory, rules_dir: Path, config: RunnerConfig, project: Path
) -> None:
    shared = write_rule(
        rules_dir / "shared", "team.yaml", RULE.format(id="team", command="touch trusted")
    )
    sync(session_factory, rules_dir)
    with session_factory.begin() as session:
        rule_trust_db.trust_hash(session, hashlib.sha256(shared.read_bytes()).hexdigest(), "admin")
    run_id = dispatch(session_factory, InMemorySender(), "team", TriggerEvent.manual()).run.id
    write_rule(rules_dir / "shared", "team.yaml", RULE.format(id="team", command="touch evil"))
    sync(session_factory, rules_dir)

    assert execute_run(session_factory, config, run_id, "w1") == RunStatus.FAILED
    assert not (project / "evil").exists() and not (project / "trusted").exists()
