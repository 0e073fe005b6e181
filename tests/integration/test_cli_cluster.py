"""Cluster-mode CLI on PostgreSQL and Redis: migrate, sync rules, run workers, inspect messages."""

from __future__ import annotations

import json
import subprocess
import uuid

import redis
from alembic.script import ScriptDirectory
from sqlalchemy import select

from ade_tasks.db.engine import create_db_engine
from ade_tasks.db.migrate import alembic_config
from ade_tasks.db.schema import RuleRow
from ade_tasks.runs.dispatch import dispatch
from ade_tasks.runs.trigger_events import TriggerEvent
from tests.conftest import write_rule
from tests.integration.conftest import Cluster, _admin_execute
from tests.integration.test_run_path import add_rule, finished
from tests.support import BIN, Child, wait_until

RULE = """
id: {id}
triggers: [{{type: manual}}]
execution: {{kind: built-in, actions: [{{type: run-command, command: "{command}"}}]}}
"""


def cli(
    cluster: Cluster, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "ade-tasks"), *args],
        env=cluster.env if env is None else env,
        cwd=cluster.tmp,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_db_upgrade_migrates_an_empty_postgresql_database(cluster: Cluster) -> None:
    name = f"ade_it_empty_{uuid.uuid4().hex[:8]}"
    _admin_execute(f"CREATE DATABASE {name}")
    try:
        url = cluster.env["ADE_DATABASE_URL"].rsplit("/", 1)[0] + f"/{name}"
        result = subprocess.run(
            [str(BIN / "ade-tasks"), "db", "upgrade"],
            env={**cluster.env, "ADE_DATABASE_URL": url},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 0, result.stderr
        head = ScriptDirectory.from_config(alembic_config(create_db_engine(url))).get_current_head()
        assert f"database at revision {head}" in result.stdout
    finally:
        _admin_execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def test_rules_sync_versions_changes_and_never_drops_rules_of_broken_files(
    cluster: Cluster,
) -> None:
    rules_dir = cluster.tmp / "rules"
    write_rule(rules_dir, "a.yaml", RULE.format(id="alpha", command="true"))
    write_rule(rules_dir, "b.yaml", RULE.format(id="beta", command="true"))
    first = cli(cluster, "rules", "sync", str(rules_dir))
    assert first.returncode == 0 and "2 added" in first.stdout

    write_rule(rules_dir, "a.yaml", RULE.format(id="alpha", command="echo changed"))
    write_rule(rules_dir, "b.yaml", "id: beta\ntriggers: [")  # broken mid-edit
    second = cli(cluster, "rules", "sync", str(rules_dir))
    assert second.returncode == 1
    assert "b.yaml:line" in second.stderr and "1 updated" in second.stdout
    assert "were kept because some files have problems" in second.stdout
    with cluster.session_factory() as session:
        rows = {row.id: row for row in session.scalars(select(RuleRow))}
    assert set(rows) == {"alpha", "beta"} and rows["alpha"].version == 2

    (rules_dir / "b.yaml").unlink()
    third = cli(cluster, "rules", "sync", str(rules_dir))
    assert third.returncode == 0 and "1 removed" in third.stdout
    with cluster.session_factory() as session:
        assert [row.id for row in session.scalars(select(RuleRow))] == ["alpha"]


def test_run_messages_carry_only_the_run_id_and_the_rule_as_task_name(cluster: Cluster) -> None:
    add_rule(cluster, "visible", '            - {id: a, type: run-command, command: "true"}')
    run_id = dispatch(
        cluster.session_factory, cluster.sender(), "visible", TriggerEvent.manual()
    ).run.id
    (raw,) = redis.Redis.from_url(cluster.settings.broker_url).lrange("ade.builtin", 0, -1)
    message = json.loads(raw)
    assert message["headers"]["task"] == "ade.runs.execute"
    assert message["headers"]["shadow"] == "visible"  # what Flower shows as the task's name
    assert message["headers"]["argsrepr"] == repr([run_id])
    assert message["content-type"] == "application/json"


def test_ade_tasks_worker_runs_runs_next_to_a_plain_celery_worker(cluster: Cluster) -> None:
    add_rule(cluster, "both", '            - {id: a, type: run-command, command: "sleep 0.5"}')
    name = f"cli-{uuid.uuid4().hex[:8]}@localhost"
    child = Child(
        [
            str(BIN / "ade-tasks"),
            "worker",
            "-Q",
            "ade.builtin",
            "-c",
            "1",
            "-n",
            name,
            "--without-mingle",
            "--without-gossip",
        ],
        cluster.env,
        cluster.tmp / "cli-worker.log",
        cluster.tmp,
    )
    cluster.children.append(child)
    control = cluster.celery.control
    wait_until(
        lambda: control.ping(destination=[name], timeout=0.5), 30, f"{name} (log {child.log})"
    )
    cluster.worker(concurrency=1)
    sender = cluster.sender()
    ids = [
        dispatch(cluster.session_factory, sender, "both", TriggerEvent.manual()).run.id
        for _ in range(6)
    ]
    rows = [finished(cluster, run_id) for run_id in ids]
    assert {row.status for row in rows} == {"succeeded"}
    assert name in {row.worker.split(":")[0] for row in rows if row.worker}
