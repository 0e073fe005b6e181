"""What the agent-user tests share: the user (`nobody`, on every Debian machine) and a scratch
directory it may enter (pytest's own tmp directories are 0700, the worker's alone)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from ade_workers.containment.agent_user import AgentUser

AGENT_USER = "nobody"


def agent_user() -> AgentUser:
    """`nobody` as the agent user; switching users needs root (CI runs as root)."""
    if os.geteuid() != 0:
        if os.environ.get("CI"):
            pytest.fail("the agent-user tests need a worker running as root (CI runs as root)")
        pytest.skip("switching to the agent user needs root")
    user = AgentUser.named(AGENT_USER)
    assert user is not None
    return user


def open_dir() -> Iterator[Path]:
    """A fresh directory (0755) below one the agent user may enter (a fixture's body)."""
    path = Path(tempfile.mkdtemp(prefix="ade-agent-user-", dir="/tmp"))
    path.chmod(0o755)
    try:
        yield path.resolve()
    finally:
        shutil.rmtree(path, ignore_errors=True)
