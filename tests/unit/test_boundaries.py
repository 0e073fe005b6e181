"""Package boundaries (docs/architecture.md): the packages import downwards only, the domain never
imports celery or fastapi, and only its db/ room writes the cluster's database."""

from __future__ import annotations

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
