"""The agent user (`ADE_AGENT_USER`): who it may be, and what the engine opens to it."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ade_tasks.agents.protected import ProtectedPaths
from ade_tasks.settings import Settings
from ade_workers.actions.run_command import NO_BARE_DISCOVERY
from ade_workers.containment.agent_user import AgentUser, AgentUserError, AgentUsers
from ade_workers.integrations import git_lanes as lanes
from ade_workers.integrations.git_lanes import LaneError
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
    assert AgentUsers.from_settings(Settings(agent_user=None)) is None


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


def _owner(path: Path) -> tuple[int, int, int]:
    st = os.lstat(path)
    return st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)


def test_the_worktree_becomes_the_users_except_the_engines_entries(open_dir: Path) -> None:
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

    mine = (user.uid, user.gid)
    assert _owner(tree / "src")[:2] == mine and _owner(tree / "src" / "app.py")[:2] == mine
    assert _owner(tree / "run.sh") == (*mine, 0o755)
    assert _owner(tree / "suid") == (*mine, 0o755)  # chown cleared the setuid bit
    # The worktree holds .git and .ade: it stays the worker's, open to the group, sticky.
    assert _owner(tree) == (0, user.gid, 0o1775)
    for kept in (tree / ".git", tree / ".git" / "index", tree / ".ade", database, outside):
        assert _owner(kept)[:2] == (0, 0), kept
    assert _owner(tree / "hardlink")[:2] == (0, 0)  # its other name is outside
    changed = subprocess.run(
        ["git", "-C", str(tree), "diff", "--name-only"], capture_output=True, text=True, check=True
    )
    assert changed.stdout == ""  # the worker's git still sees its worktree, unchanged


def as_user(user: AgentUser, command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`command` in a shell as the agent user."""
    return subprocess.run(
        ["sh", "-c", command], cwd=cwd, user=user.uid, group=user.gid, extra_groups=[],
        capture_output=True, text=True,
    )  # fmt: skip


def test_the_user_cannot_move_the_workers_entries_to_plant_a_git_directory(
    open_dir: Path,
) -> None:
    """A reviewer's attack: rename a directory the worker owns to `.git`, fill it with a
    config whose fsmonitor runs a command, and wait for the worker's git."""
    user = agent_user()
    tree = _worktree(open_dir)
    pwned = open_dir / "pwned"
    user.open_worktree(tree, ProtectedPaths.for_worktree(tree))
    attack = (
        "mv .git g || rm -f .git; mv .ade a; git init -q /tmp/$$ && mkdir -p lib/x && "
        f"cp -r /tmp/$$/.git/. lib/x/ && printf '[core]\n\tfsmonitor = \"touch {pwned}\"\n' "
        ">> lib/x/config && mv lib/x lib/.git; mv src .git; rm -rf /tmp/$$"
    )

    as_user(user, attack, tree)
    status = subprocess.run(["git", "-C", str(tree / "lib"), "status"], capture_output=True)

    assert (tree / ".git").is_dir() and _owner(tree / ".git")[0] == 0
    assert (tree / ".ade" / "api-token").read_text() == "tok"
    assert status.returncode != 0 and b"dubious ownership" in status.stderr  # lib/.git is its own
    assert not pwned.exists()


def test_no_directory_of_the_workers_can_be_moved_or_pass_for_a_bare_repository(
    open_dir: Path,
) -> None:
    """The second review: a directory holding engine data stays the worker's; the agent moved
    it (its parent was the agent's), or built a bare repository inside it whose config ran a
    command as the worker's git looked."""
    user = agent_user()
    tree = _worktree(open_dir)
    web = tree / "apps" / "web"
    (web / ".ade").mkdir(parents=True)
    pwned = open_dir / "pwned"
    user.open_worktree(tree, ProtectedPaths.for_worktree(tree))
    evil = open_dir / "evil.sh"
    evil.write_text(f"#!/bin/sh\nid > {pwned}\n")
    evil.chmod(0o755)
    plant = open_dir / "plant.sh"  # what the agent runs: a bare repository inside apps/web
    plant.write_text(
        f"cd {web}\necho 'ref: refs/heads/main' > HEAD\nmkdir -p objects refs\n"
        "printf '[core]\\n\\trepositoryformatversion = 0\\n\\tbare = false\\n"
        f"\\tworktree = {web}\\n\\tfsmonitor = {evil}\\n' > config\n"
    )
    plant.chmod(0o644)
    moved = as_user(user, "mv apps/web moved", tree)
    as_user(user, f"sh {plant}", tree)
    with pytest.raises(LaneError) as engine:  # the engine's own git
        lanes.git(web, "status")
    command_env = {**os.environ, **NO_BARE_DISCOVERY}
    command = subprocess.run(["git", "status"], cwd=web, env=command_env, capture_output=True)

    assert moved.returncode != 0 and web.is_dir()
    assert _owner(tree / "apps") == (0, user.gid, 0o1775)  # on the way to .ade: the worker's
    assert (web / "config").exists()  # the agent did build it
    assert "cannot use bare repository" in engine.value.message
    assert b"cannot use bare repository" in command.stderr
    assert not pwned.exists()
    subprocess.run(["git", "status"], cwd=web, capture_output=True)  # git left to itself
    assert pwned.read_text().startswith("uid=0(root)")  # so the plant was real


def test_the_users_own_files_stay_its_to_rename_and_remove(open_dir: Path) -> None:
    user = agent_user()
    tree = _worktree(open_dir)
    user.open_worktree(tree, ProtectedPaths.for_worktree(tree))

    done = as_user(user, "mv run.sh go.sh && rm src/app.py && echo new > top.txt", tree)

    assert done.returncode == 0, done.stderr
    assert (tree / "go.sh").exists() and not (tree / "src" / "app.py").exists()


def test_file_access_is_the_users_on_this_thread_only(open_dir: Path) -> None:
    user = agent_user()
    secret = open_dir / "secret"
    secret.write_text("root only")
    secret.chmod(0o600)
    own = open_dir / "own"
    own.mkdir()
    user.hand_over(own)
    seen_by_other_thread: list[str] = []
    go = threading.Event()

    def read_when_told() -> None:
        go.wait(10)
        seen_by_other_thread.append(secret.read_text())

    other = threading.Thread(target=read_when_told)  # started as the worker, before the switch
    other.start()
    with user.file_access():
        with pytest.raises(PermissionError):
            secret.read_text()
        (own / "made.txt").write_text("x")
        with pytest.raises(PermissionError):
            (open_dir / "made.txt").write_text("x")  # the worker could; the user may not
        go.set()
        other.join(10)

    assert seen_by_other_thread == ["root only"]
    assert secret.read_text() == "root only"  # the worker's access is back
    assert _owner(own / "made.txt")[:2] == (user.uid, user.gid)


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


def test_each_session_leases_a_user_no_other_session_holds(tmp_path: Path) -> None:
    agent_user()
    users = AgentUsers.from_settings(Settings(agent_user="nobody, daemon", data_dir=tmp_path))
    assert users is not None and [u.name for u in users.users] == ["nobody", "daemon"]
    assert users.locks == tmp_path / "agent-leases"  # the worker's data directory
    soon = time.monotonic() + 0.5

    with users.lease(soon) as first, users.lease(soon) as second:
        assert {first.name, second.name} == {"nobody", "daemon"}
        with pytest.raises(AgentUserError) as busy, users.lease(soon):
            pass
    with users.lease(time.monotonic()) as again:  # released: free at once
        assert again.name == "nobody"

    assert "every agent user (nobody, daemon) is busy" in busy.value.message
    assert "name more users in ADE_AGENT_USER" in busy.value.message


def test_a_lease_held_by_another_worker_process_is_respected(tmp_path: Path) -> None:
    agent_user()
    holder = subprocess.Popen(
        [sys.executable, "-c", LEASE_HOLDER.format(data=str(tmp_path))],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "nobody"
        users = AgentUsers.from_settings(Settings(agent_user="nobody,daemon", data_dir=tmp_path))
        assert users is not None
        with users.lease(time.monotonic()) as user:
            assert user.name == "daemon"
    finally:
        holder.kill()
        holder.wait(10)


LEASE_HOLDER = """
import sys, time
from pathlib import Path
from ade_workers.containment.agent_user import AgentUsers
from ade_tasks.settings import Settings
users = AgentUsers.from_settings(Settings(agent_user="nobody", data_dir=Path({data!r})))
with users.lease(time.monotonic()) as user:
    print(user.name, flush=True)
    sys.stdin.read()
"""


def test_a_user_named_twice_or_unknown_is_refused() -> None:
    agent_user()
    with pytest.raises(AgentUserError, match="names one user twice"):
        AgentUsers.from_settings(Settings(agent_user="nobody,65534"))
    with pytest.raises(AgentUserError, match="'no-such-ade-agent': no such user"):
        AgentUsers.from_settings(Settings(agent_user="nobody,no-such-ade-agent"))


def test_a_lease_directory_someone_else_made_is_refused(tmp_path: Path) -> None:
    user = agent_user()
    planted = tmp_path / "leases"
    planted.mkdir(mode=0o700)
    os.chown(planted, user.uid, user.gid)
    users = AgentUsers((user,), planted)

    with pytest.raises(AgentUserError, match="is not a private directory of the worker's"):
        with users.lease(time.monotonic()):
            pass
