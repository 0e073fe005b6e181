"""Package boundaries (docs/architecture.md): the packages import downwards only, the domain never
imports celery or fastapi, and only its db/ room writes the cluster's database."""

from __future__ import annotations

import ast
import json
import pkgutil
import subprocess
import sys

import grimp

import ade_tasks
from tests.conftest import REPO

WRITES = {"insert", "update", "delete"}


def test_ade_tasks_never_imports_celery_or_fastapi() -> None:
    # Given every module of ade_tasks (migrations included)
    modules = [m.name for m in pkgutil.walk_packages(ade_tasks.__path__, "ade_tasks.")]
    modules = [m for m in modules if ".migrations" not in m]
    assert "ade_tasks.runs.dispatch" in modules and "ade_tasks.db.runs" in modules
    # When a fresh interpreter imports all of them
    script = (
        "import importlib, sys\n"
        f"for name in {modules!r}: importlib.import_module(name)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('celery', 'fastapi', 'kombu')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, check=True
    )
    # Then neither celery, kombu nor fastapi was loaded
    assert out.stdout.strip() == "[]"


def test_ade_workers_never_imports_fastapi() -> None:
    script = (
        "import ade_workers.celery.app, ade_workers.celery.tasks, ade_workers.engine.runner, sys\n"
        "print([m for m in sys.modules if m.split('.')[0] == 'fastapi'])"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"


def test_the_packages_import_downwards_only() -> None:
    # ade_api -> ade_workers -> ade_tasks, never back (imports inside functions count too)
    graph = grimp.build_graph("ade_api", "ade_workers", "ade_tasks", cache_dir=None)
    illegal = graph.find_illegal_dependencies_for_layers(
        layers=("ade_api", "ade_workers", "ade_tasks")
    )
    assert sorted(f"{d.importer} -> {d.imported}" for d in illegal) == []


def test_the_sender_interfaces_and_their_test_double_import_nothing_heavy() -> None:
    # Given a fresh interpreter
    script = (
        "import json, sys, ade_tasks.runs.senders, ade_tasks.testing\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('ade_tasks', 'sqlalchemy'))))"
    )
    # When it imports the sender interfaces and the in-memory sender
    out = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, check=True
    )
    # Then neither the database, dispatch nor sqlalchemy came with them
    loaded = json.loads(out.stdout)
    assert "ade_tasks.db" not in loaded and "sqlalchemy" not in loaded
    assert loaded == [
        "ade_tasks",
        "ade_tasks.errors",
        "ade_tasks.runs",
        "ade_tasks.runs.senders",
        "ade_tasks.testing",
    ]


def test_sql_writes_of_the_cluster_database_live_in_db() -> None:
    # Given every module of ade_tasks outside db/, but the relay's store, which writes the relay's
    # own database (ade_tasks/relay/store.py says why it is not the cluster's)
    root = REPO / "ade_tasks"
    paths = [
        path
        for path in root.rglob("*.py")
        if path.relative_to(root).parts[0] != "db" and path != root / "relay" / "store.py"
    ]
    # When their imports of SQLAlchemy are read
    writers = sorted(
        f"{path.relative_to(REPO)}: {alias.name}"
        for path in paths
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sqlalchemy")
        for alias in node.names
        if alias.name in WRITES
    )
    # Then none builds an INSERT, UPDATE or DELETE: those are query functions in db/
    assert len(paths) > 100 and writers == []
