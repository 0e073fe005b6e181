"""No module of the packages grows past what a reader takes in at once: one concept a module.

The limit is 500 lines; a module that passes it is split by concept (see docs/development.md's
layout), never given a higher limit."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
LIMIT = 500


def test_no_module_is_longer_than_the_limit() -> None:
    sizes = {
        str(path.relative_to(ROOT)): len(path.read_text().splitlines())
        for package in ("ade_tasks", "ade_workers", "ade_api")
        for path in (ROOT / package).rglob("*.py")
        if "migrations" not in path.parts
    }
    assert sizes, "no modules found"
    too_long = {name: lines for name, lines in sizes.items() if lines > LIMIT}
    assert too_long == {}, f"split these by concept (limit {LIMIT} lines): {too_long}"
