"""Every file under deploy/ is a kind these tests read, and it parses; commands are found in
every kind of file. Nothing is built or started: Docker is not needed.
"""

from __future__ import annotations

import json

from tests.unit.deploy.deploy_files import all_commands, deploy_files, systemd_unit, yaml_docs

# Each file type under deploy/ and how it is read; a new kind of file must be added here.
KNOWN_FILE_KINDS = ("Dockerfile", ".dockerignore", ".yml", ".yaml", ".service", ".env.example",
                    ".json")  # fmt: skip


def test_every_file_under_deploy_is_a_kind_this_test_reads() -> None:
    files = deploy_files()
    assert files, "deploy/ is empty"
    for path in files:
        assert path.name.endswith(KNOWN_FILE_KINDS), f"{path}: no check reads this kind of file"
        if path.suffix in (".yml", ".yaml"):
            assert yaml_docs(path), f"{path} holds no YAML document"
        if path.suffix == ".json":
            assert isinstance(json.loads(path.read_text()), dict), f"{path}: not a JSON object"
        if path.suffix == ".service":
            sections = systemd_unit(path)
            assert {"Unit", "Service", "Install"} <= set(sections), path.name


def test_commands_are_found_in_every_kind_of_file() -> None:
    sources = {c.source.split(" ")[0].split("/")[0] for c in all_commands() if c.program}
    assert {"Dockerfile", "docker-compose.yml", "k8s", "systemd"} <= sources
    ade = [c for c in all_commands() if c.program == "ade-tasks"]
    assert len(ade) >= 15, [c.source for c in ade]
