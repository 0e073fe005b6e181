"""The agent user (`ADE_AGENT_USER`): who it may be, and what the engine opens to it."""

from __future__ import annotations

import os
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from ade_tasks.agents.protected import ProtectedPaths
from ade_tasks.settings import Settings
from ade_workers.agent_user import AgentUser, AgentUserError
from tests import agent_user_support
from tests.agent_user_support import AGENT_USER, agent_user


@pytest.fixture
def open_dir() -> Iterator[Path]:
    yield from agent_user_support.open_dir()


def test_an_unknown_user_is_refused_with_what_to_do() -> None:
    with pytest.raises(AgentUserError) as refused:
        AgentUser.named("no-such-ade-agent")
    assert refused.value.message == (
        "ADE_AGENT_USER='no-such-ade-agent': no such user on this worker; create it "
        "(useradd --system --no-create-home no-such-ade-agent) or unset ADE_AGENT_USER"
    )


def test_root_is_no_agent_user() -> None:
    with pytest.raises(AgentUserError, match="is root; name an unprivileged user"):
        AgentUser.named("root", worker_uid=1000)


def test_a_worker_that_is_not_root_cannot_switch_users() -> None:
    with pytest.raises(AgentUserError) as refused:
        AgentUser.named(AGENT_USER, worker_uid=1000)
    assert "only a worker running as root" in refused.value.message
    assert "runs as uid 1000" in refused.value.message


def test_the_workers_own_user_changes_nothing() -> None:
    assert AgentUser.named(str(os.geteuid())) is None
    assert AgentUser.from_settings(Settings(agent_user=None)) is None


def test_a_uid_names_the_user_too() -> None:
    user = AgentUser.named("65534", worker_uid=0)
    assert user is not None and user.name == AGENT_USER and user.uid == 65534


def test_the_agents_git_may_read_only_its_worktree(tmp_path: Path) -> None:
    user = AgentUser.named(AGENT_USER, worker_uid=0)
    assert user is not None
    env = user.env(tmp_path)
    assert env["GIT_CONFIG_KEY_0"] == "safe.directory"
    assert env["GIT_CONFIG_VALUE_0"] == os.path.realpath(tmp_path)
    assert env["USER"] == AGENT_USER


def _worktree(root: Path) -> Path:
    tree = root / "wt"
    (tree / "src").mkdir(parents=True)
    (tree / "src" / "app.py").write_text("print('hi')\n")
    (tree / "run.sh").write_text("#!/bin/sh\n")
    (tree / "run.sh").chmod(0o755)
    subprocess.run(["git", "init", "-q", str(tree)], check=True)
    subprocess.run(["git", "-C", str(tree), "add", "-A"], check=True)
    (tree / ".ade").mkdir(mode=0o700)
    (tree / ".ade" / "api-token").write_text("tok")
    return tree


def test_the_worktree_opens_to_the_users_group_and_nothing_else(open_dir: Path) -> None:
    user = agent_user()
    tree = _worktree(open_dir)
    outside = open_dir / "outside.txt"
    outside.write_text("not the agent's")
    (tree / "link").symlink_to(outside)
    os.link(outside, tree / "hardlink")
    (tree / "suid").write_text("")
    (tree / "suid").chmod(0o4755)
    database = tree / "engine.db"
    database.write_text("")
    protected = ProtectedPaths(
        worktree=str(tree), engine_data=((str(database), "the SQLite database"),)
    )

    user.open_worktree(tree, protected)

    def group_of(path: Path) -> tuple[int, int]:
        st = os.lstat(path)
        return st.st_gid, stat.S_IMODE(st.st_mode)

    assert group_of(tree) == (user.gid, 0o2775)
    assert group_of(tree / "src") == (user.gid, 0o2775)
    assert group_of(tree / "src" / "app.py") == (user.gid, 0o664)
    assert group_of(tree / "run.sh") == (user.gid, 0o775)
    assert group_of(tree / "suid") == (user.gid, 0o775)  # the setuid bit is gone
    for untouched in (tree / ".git", tree / ".git" / "index", tree / ".ade", database, outside):
        assert os.lstat(untouched).st_gid != user.gid, untouched
    assert os.lstat(tree / "hardlink").st_gid != user.gid  # its other name is outside
    changed = subprocess.run(
        ["git", "-C", str(tree), "diff", "--name-only"], capture_output=True, text=True, check=True
    )
    assert changed.stdout == ""  # group and mode bits leave git's view of the files clean


def test_a_file_the_worker_wrote_for_the_agent_is_opened_to_it(open_dir: Path) -> None:
    user = agent_user()
    tree = open_dir / "wt"
    (tree / "new" / "deep").mkdir(parents=True)
    written = tree / "new" / "deep" / "f.txt"
    written.write_text("x")

    user.adopt(written, tree)

    assert os.stat(written).st_gid == user.gid and os.stat(written).st_mode & stat.S_IWGRP
    assert os.stat(tree / "new").st_gid == user.gid
    assert os.stat(tree).st_gid != user.gid  # the worktree itself is not adopted here


def test_a_worktree_the_user_cannot_reach_is_refused_naming_the_directory(
    open_dir: Path,
) -> None:
    user = agent_user()
    data = open_dir / ".ade"
    lane = data / "lanes" / "default" / "fix"
    lane.mkdir(parents=True)
    data.chmod(0o700)

    with pytest.raises(AgentUserError) as refused:
        user.open_worktree(lane, ProtectedPaths(worktree=str(lane)))

    message = refused.value.message
    assert f"cannot reach the worktree {lane}: {data} (mode 0700) does not let it in" in message
    assert "set ADE_LANES_ROOT to a directory outside the data directory" in message
    assert os.stat(lane).st_gid != user.gid  # nothing was changed


def test_the_hook_python_is_one_the_user_may_run(open_dir: Path) -> None:
    user = agent_user()
    private = open_dir / "private"
    private.mkdir(mode=0o700)
    hidden = private / "python3"
    hidden.symlink_to("/usr/bin/python3")

    assert not user.may_run(str(hidden))
    chosen = user.python([str(hidden)])
    assert chosen != str(hidden) and user.may_run(chosen)
