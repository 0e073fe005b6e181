"""Every benchmark module imports: a bench that names what a refactor moved fails here, not
on the day someone runs it."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[3] / "bench"


@pytest.mark.parametrize("module", sorted(p.stem for p in BENCH.glob("*.py")))
def test_bench_module_imports(module: str) -> None:
    assert importlib.import_module(f"bench.{module}").__name__ == f"bench.{module}"
