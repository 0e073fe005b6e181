"""Backup and restore (issue 37, finding 11): the procedure of docs/operations.md, run as written.

A real run leaves history in PostgreSQL; `pg_dump --format=custom` backs the database up,
`pg_restore` loads it into a fresh database, and an `ade-tasks api` process on the restored
database serves the run, its steps and their output back, to the token the old database issued.
"""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

from sqlalchemy.engine import make_url

from ade_tasks.runs.dispatch import dispatch
from ade_tasks.runs.trigger_events import TriggerEvent
from tests.integration.conftest import Cluster, _admin_execute
from tests.integration.test_run_path import add_rule, finished
from tests.support import BIN, child_env


def libpq_url(url: str) -> str:
    """The URL pg_dump and pg_restore take (no SQLAlchemy driver name)."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def test_a_dump_restored_into_a_fresh_database_serves_the_history(
    cluster: Cluster, tmp_path: Path
) -> None:
    # Given a cluster whose database holds a finished run with its steps and events
    add_rule(
        cluster, "nightly", '            - {id: report, type: run-command, command: "echo 42"}'
    )
    cluster.worker(queues="ade.builtin,ade.control")
    run_id = dispatch(
        cluster.session_factory, cluster.sender(), "nightly", TriggerEvent.manual()
    ).run.id
    assert finished(cluster, run_id).status == "succeeded"

    # When it is backed up and restored into a fresh database, with the commands of the docs
    dump = tmp_path / "ade.dump"
    source = libpq_url(cluster.settings.database_url)
    subprocess.run(["pg_dump", "--format=custom", f"--file={dump}", source], check=True, timeout=60)
    name = f"ade_restored_{uuid.uuid4().hex[:8]}"
    _admin_execute(f"CREATE DATABASE {name}")
    try:
        restored = str(make_url(cluster.settings.database_url).set(database=name))
        subprocess.run(
            ["pg_restore", "--no-owner", "--exit-on-error", f"--dbname={libpq_url(restored)}",
             str(dump)],
            check=True,
            timeout=60,
        )  # fmt: skip
        upgrade = subprocess.run(
            [str(BIN / "ade-tasks"), "db", "upgrade"],
            env=child_env({"ADE_DATABASE_URL": restored}),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert upgrade.returncode == 0, upgrade.stderr

        # Then an API on the restored database serves the run with its steps and output
        api = cluster.api(env={"ADE_DATABASE_URL": restored})
        run = api.get(f"/api/v1/runs/{run_id}")
        assert run.status_code == 200, run.text
        assert run.json()["status"] == "succeeded"
        assert [step["step_id"] for step in run.json()["steps"]] == ["report"]
        assert "42" in run.json()["steps"][0]["output"]
        listed = api.get("/api/v1/runs", params={"rule": "nightly"}).json()
        assert run_id in str(listed)
    finally:
        for child in cluster.children:  # the restored API lets go of the database first
            child.stop()
        _admin_execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
