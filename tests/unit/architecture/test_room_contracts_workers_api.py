"""The rooms of `ade_workers` and `ade_api` and the one direction imports go between them.

A room is a subpackage or a top-level module. Within each package imports point one way only,
from the rooms listed first to the rooms listed after them, never back; a set is a floor of
rooms that do not import each other. Imports inside functions and under `TYPE_CHECKING` count:
grimp reads every import statement, wherever it stands.

`ade_workers`: the Celery glue hands a run to the engine; the engine runs the chain's actions;
the `agent-session` action runs the agents; commands of actions and agents alike run in
containment, which runs them in the OS sandbox. `ade_api`: the CLI serves the relay and the HTTP
API; the relay's public side reuses the HTTP edge's parts.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import cache

import grimp
import pytest

from tests.unit.architecture.graphs import strongly_connected

#: Each package's rooms, from the top down (a set: rooms that never import each other).
LAYERS: dict[str, Sequence[str | set[str]]] = {
    "ade_workers": (
        "celery_app",
        "doctor",
        "celery",
        "engine",
        "actions",
        "agents",
        "containment",
        {"sandbox", "integrations"},
    ),
    "ade_api": ("cli", "relay", {"http", "dev_model"}),
    # Each command module attaches its commands to `root`'s groups and imports no other
    # command module; the modules below `root` are shared by commands and import none of them.
    # (`registry` names the command modules as strings, and `root`'s lazy groups import one
    # when its command runs: the late binding that keeps start-up cheap, not an import.)
    "ade_api.cli": (
        {
            "actions",
            "admin",
            "backfill",
            "cron",
            "dev_model",
            "doctor",
            "events",
            "history",
            "ingress_events",
            "logs",
            "operations",
            "poll",
            "processes",
            "providers",
            "relay",
            "rule_push",
            "rules",
            "runs",
        },
        "run_stream",
        "root",
        {"dev", "git_hooks", "health", "plain_http", "registry", "serve", "step_lines"},
    ),
}


@cache
def _graph() -> grimp.ImportGraph:
    return grimp.build_graph("ade_workers", "ade_api", cache_dir=None)


def _collapsed(graph: grimp.ImportGraph, package: str) -> dict[str, set[str]]:
    """The imports between the rooms (children) of `package`, each room standing for itself
    and everything below it."""
    rooms = graph.find_children(package)

    def room_of(module: str) -> str | None:
        return next((r for r in rooms if module == r or module.startswith(r + ".")), None)

    edges: dict[str, set[str]] = {room: set() for room in rooms}
    for room in rooms:
        for module in {room} | graph.find_descendants(room):
            for imported in graph.find_modules_directly_imported_by(module):
                target = room_of(imported)
                if target is not None and target != room:
                    edges[room].add(target)
    return edges


def _packages(graph: grimp.ImportGraph) -> Iterable[str]:
    return sorted(m for m in graph.modules if graph.find_children(m))


@pytest.mark.parametrize("package", sorted(LAYERS))
def test_imports_between_rooms_go_down_only(package: str) -> None:
    graph = _graph()
    illegal = graph.find_illegal_dependencies_for_layers(
        layers=LAYERS[package], containers={package}
    )
    assert sorted(f"{d.importer} -> {d.imported}" for d in illegal) == []


@pytest.mark.parametrize("package", sorted(LAYERS))
def test_every_room_is_placed(package: str) -> None:
    # A new room states where it stands: an unlisted one would escape the contract.
    listed = {
        f"{package}.{room}"
        for layer in LAYERS[package]
        for room in ([layer] if isinstance(layer, str) else layer)
    }
    assert listed == _graph().find_children(package)


def test_no_rooms_import_each_other_at_any_depth() -> None:
    graph = _graph()
    loops = {p: strongly_connected(_collapsed(graph, p)) for p in _packages(graph)}
    assert {p: found for p, found in loops.items() if found} == {}


def test_no_modules_import_each_other() -> None:
    graph = _graph()
    edges = {m: graph.find_modules_directly_imported_by(m) for m in graph.modules}
    assert strongly_connected(edges) == []


def test_the_checks_find_a_loop_and_an_upward_import() -> None:
    # Given a graph with a loop between two rooms and an import against the layers
    graph = grimp.ImportGraph()
    for module in ("pkg", "pkg.low", "pkg.low.a", "pkg.high", "pkg.high.b"):
        graph.add_module(module)
    graph.add_import(importer="pkg.low.a", imported="pkg.high.b")
    graph.add_import(importer="pkg.high.b", imported="pkg.low.a")
    # Then both checks see it
    assert strongly_connected(_collapsed(graph, "pkg")) == [{"pkg.low", "pkg.high"}]
    illegal = graph.find_illegal_dependencies_for_layers(layers=("high", "low"), containers={"pkg"})
    assert {(d.importer, d.imported) for d in illegal} == {("pkg.low", "pkg.high")}
