"""No circles at any level: no module imports another that imports it back, at module level nor
through imports inside functions (which hide a cycle from Python but not from a reader) nor under
TYPE_CHECKING (which hides it from the interpreter but not from mypy or a reader); and the rooms of
a package (its subpackages and top-level modules) import one another in the one direction that
the contracts in pyproject.toml (`[tool.importlinter]`) state."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest
from importlinter import configuration
from importlinter.application import use_cases

from tests.unit.architecture.graphs import strongly_connected

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = ("ade_tasks", "ade_workers", "ade_api")


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _imports(modules: dict[str, Path], *, in_functions: bool) -> dict[str, set[str]]:
    """Module -> the project modules it imports (at module level, or anywhere)."""
    graph: dict[str, set[str]] = {name: set() for name in modules}

    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    for name, path in modules.items():

        def visit(node: ast.AST, inside: bool, module: str = name) -> None:
            for child in ast.iter_child_nodes(node):
                deeper = inside or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
                if isinstance(child, ast.Import | ast.ImportFrom) and (in_functions or not deeper):
                    targets = (
                        [alias.name for alias in child.names]
                        if isinstance(child, ast.Import)
                        else [f"{child.module}.{alias.name}" for alias in child.names]
                        + [child.module or ""]
                    )
                    for target in targets:
                        found = resolve(target)
                        # A module's own packages are imported before it, whatever it imports:
                        # `from ade_api.cli import step_lines` in ade_api.cli.events adds no edge.
                        if found and found != module and not module.startswith(found + "."):
                            graph[module].add(found)
                visit(child, deeper, module)

        visit(ast.parse(path.read_text()), False)
    return graph


def _kept(config: Path, *contracts: str) -> bool:
    """Are the contracts of `config` (all, or those ids) kept? import-linter's check without its
    command line, which configures logging anew and so silences the loggers later tests read."""
    configuration.configure()
    return use_cases.lint_imports(
        config_filename=str(config), limit_to_contracts=contracts, cache_dir=None, no_logo=True
    )


def test_no_module_imports_one_that_imports_it_back_type_checking_included() -> None:
    assert strongly_connected(_imports(_modules(), in_functions=False)) == []


def test_imports_inside_functions_close_no_cycle_either() -> None:
    assert strongly_connected(_imports(_modules(), in_functions=True)) == []


def test_the_check_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert strongly_connected(graph) == [{"a", "b", "c"}]


def test_the_rooms_keep_the_contracts_in_pyproject() -> None:
    # Given the contracts of [tool.importlinter] (no circle between rooms at any depth, and the
    # layers of each package's rooms), when import-linter checks the three packages
    kept = _kept(ROOT / "pyproject.toml")
    # Then every contract is kept (the report above names each broken import)
    assert kept


def test_the_contracts_count_imports_under_type_checking_and_inside_functions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a package whose lower room imports the upper one only for annotations, and whose
    # upper room imports a basic that imports it back only inside a function
    files = {
        "toy/__init__.py": "",
        "toy/upper.py": "from toy import lower, basic\n",
        "toy/lower.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import toy.upper\n",
        "toy/basic.py": "def later() -> None:\n    import toy.upper\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(text)
    (tmp_path / "contracts.toml").write_text(
        textwrap.dedent(
            """\
            [tool.importlinter]
            root_packages = ["toy"]
            [[tool.importlinter.contracts]]
            id = "acyclic"
            name = "acyclic"
            type = "acyclic_siblings"
            ancestors = ["toy"]
            [[tool.importlinter.contracts]]
            id = "layers"
            name = "layers"
            type = "layers"
            containers = ["toy"]
            layers = ["upper", "lower | basic"]
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    # When import-linter checks it, each contract on its own
    kept = {
        contract: _kept(tmp_path / "contracts.toml", contract) for contract in ("acyclic", "layers")
    }
    # Then both are broken
    assert kept == {"acyclic": False, "layers": False}
