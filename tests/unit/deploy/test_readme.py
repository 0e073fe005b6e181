"""deploy/README.md walks through every file under deploy/, with the Python its distributions
ship.
"""

from __future__ import annotations

import re
import tomllib

from tests.unit.deploy.deploy_files import DEPLOY, ROOT, deploy_files


def test_the_readme_walks_through_every_file() -> None:
    readme = (DEPLOY / "README.md").read_text()
    for path in deploy_files():
        assert path.name in readme, f"deploy/README.md does not mention {path.name}"


#: The Python 3 each distribution the walkthrough may name ships as `python3`.
DISTRIBUTION_PYTHON = {"Debian 12": "3.11", "Debian 13": "3.13", "Ubuntu 22.04": "3.10",
                       "Ubuntu 24.04": "3.12"}  # fmt: skip


def test_the_walkthrough_uses_the_python_its_distributions_ship() -> None:
    """Issue 37, finding 11: `python3.12` on Debian 12 (which ships 3.11) does not exist. The
    commands use the distribution's `python3`, and every distribution the walkthrough names
    ships one that ADE supports."""
    readme = (DEPLOY / "README.md").read_text()
    commands = "\n".join(re.findall(r"```sh\n(.*?)```", readme, re.S))
    versioned = re.findall(r"\bpython3\.\d+\b", commands)
    assert not versioned, f"deploy/README.md runs {versioned}: use the distribution's python3"
    assert re.search(r"\bpython3 -m venv\b", commands)
    named = {name: v for name, v in DISTRIBUTION_PYTHON.items() if f"{name}: {v}" in readme}
    assert "Debian 12" in named, "say which python3 Debian 12 ships"
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    needed = tuple(int(p) for p in re.findall(r"\d+", requires))  # ">=3.11"
    for name, version in named.items():
        assert tuple(map(int, version.split("."))) >= needed, f"{name} ships Python {version}"
