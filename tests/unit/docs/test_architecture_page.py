"""The architecture page (docs/architecture.md) against the code it describes: its table of run
state moves is `RUN_MOVES`, and it names every room of the three packages."""

from __future__ import annotations

import re

import grimp

from ade_tasks import states
from ade_tasks.states import INITIAL_STATUSES, RUN_MOVES, Move
from tests.conftest import REPO

PAGE = REPO / "docs" / "architecture.md"
PACKAGES = ("ade_tasks", "ade_workers", "ade_api")


def _row(name: str, sources: frozenset[str], targets: frozenset[str]) -> tuple[str, str, str]:
    return name, ", ".join(sorted(sources)), ", ".join(sorted(targets))


def _page_moves() -> list[tuple[str, ...]]:
    """The (move, from, to) cells of the page's run state table, in its order."""
    section = PAGE.read_text().split("## Run states", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ")][1:]  # no header
    return [tuple(cell.strip() for cell in row.split("|")[1:4]) for row in rows]


def test_the_run_state_table_is_run_moves() -> None:
    names = {id(move): name for name, move in vars(states).items() if isinstance(move, Move)}
    expected = [_row("create", frozenset(), INITIAL_STATUSES)]
    expected += [_row(f"`{names[id(move)]}`", move.sources, move.targets) for move in RUN_MOVES]
    table = "\n".join(f"| {move} | {was} | {to} |" for move, was, to in expected)
    assert _page_moves() == expected, f"docs/architecture.md's table should read:\n{table}"


def test_the_page_names_every_room() -> None:
    # Each room of each package has its row on the page, or its name among the basics.
    page = PAGE.read_text()
    listed = re.findall(r"^\| *\d* *\| `([a-z_]+)` \|", page, flags=re.MULTILINE)
    basics = re.search(r"^\| 12 \| the basics \| (.*) \|$", page, flags=re.MULTILINE)
    assert basics is not None
    named = set(listed) | set(re.findall(r"`([a-z_]+)`", basics.group(1)))
    graph = grimp.build_graph(*PACKAGES, cache_dir=None)
    rooms = {room.rpartition(".")[2] for p in PACKAGES for room in graph.find_children(p)}
    assert sorted(rooms - named) == []
