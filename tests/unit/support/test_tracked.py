"""Tests never read a developer's own files: copies of the shipped config hold what git tracks."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.conftest import write_rule
from tests.tracked import copy_tracked

HELLO = "id: hello\ntriggers: [{type: manual}]\n"


def git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True)


def test_a_developers_own_rule_file_is_not_copied(tmp_path: Path) -> None:
    # Given a checkout whose config/rules holds a shipped rule, an edit to it, and a rule file
    # of the developer's own with the same id (the duplicate that used to fail the e2e tests)
    checkout = tmp_path / "checkout"
    write_rule(checkout / "config" / "rules", "hello.yaml", HELLO)
    git(checkout, "init", "-q")
    git(checkout, "add", "config")
    (checkout / "config" / "rules" / "hello.yaml").write_text(HELLO + "name: edited\n")
    write_rule(checkout / "config" / "rules", "my-hello.yaml", HELLO)

    # When a test copies the config
    copied = copy_tracked(checkout / "config", tmp_path / "copy")

    # Then only the tracked file arrives, with its working-tree content
    assert [p.name for p in (copied / "rules").iterdir()] == ["hello.yaml"]
    assert (copied / "rules" / "hello.yaml").read_text().endswith("name: edited\n")
