"""The sandbox's pieces: its bwrap layout, the host check, the engine's helper copies and the
port forwarder (the sandbox itself is attacked in tests/integration/test_agent_sandbox.py)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from ade_tasks.settings import Settings
from ade_workers.containment.process import run_process
from ade_workers.sandbox import helpers, host, scratch
from ade_workers.sandbox.bridge import UnixBridge
from ade_workers.sandbox.engine import FORWARDER, agent_sandbox, command_sandbox, engine_paths
from ade_workers.sandbox.layout import HOME_SIZE, Forward, Sandbox

# Under CI a host without a sandbox fails these tests rather than skipping them.
needs_bwrap = pytest.mark.skipif(
    host.sandbox_problem() is not None and not os.environ.get("CI"), reason="no sandbox here"
)


def layout(tmp_path: Path, **fields: object) -> Sandbox:
    worktree = tmp_path / "wt"
    worktree.mkdir(exist_ok=True)
    return Sandbox(bwrap="bwrap", worktree=worktree, python=sys.executable, **fields)  # type: ignore[arg-type]


def test_a_plan_sandbox_binds_the_worktree_read_only_and_has_no_network(tmp_path):
    argv = layout(tmp_path, writable=False).command(["true"], str(tmp_path / "wt"))
    worktree = str(tmp_path / "wt")
    assert ["--ro-bind", worktree, worktree] == argv[
        argv.index(worktree) - 1 : argv.index(worktree) + 2
    ]
    assert "--unshare-net" in argv and "--unshare-pid" in argv and "--die-with-parent" in argv
    assert argv[-2:] == ["--", "true"]


def test_a_host_network_sandbox_keeps_the_network(tmp_path):
    argv = layout(tmp_path, network="host").command(["true"], "/")
    assert "--unshare-net" not in argv


def test_the_engine_is_hidden_over_the_worktree_and_a_cli_install_shows_through(tmp_path):
    engine = tmp_path / "wt" / ".venv"
    install = engine / "agent-clis" / "node_modules"
    install.mkdir(parents=True)
    argv = layout(tmp_path, hidden=(engine,), read_only=(install,)).command(["true"], "/")
    mask = argv.index("--tmpfs", argv.index(str(tmp_path / "wt")))
    assert argv[mask + 1] == str(engine)
    assert argv.index(str(install)) > mask  # bound after the mask, so it shows through
    remounted = [argv[i + 1] for i, arg in enumerate(argv) if arg == "--remount-ro"]
    assert str(engine) in remounted and argv.index(str(install)) < len(argv) - argv[::-1].index(
        "--remount-ro"
    )


def test_forwarded_ports_run_the_command_under_the_forwarder(tmp_path):
    sock = tmp_path / "model.sock"
    argv = layout(tmp_path, forwarder=Path("/x/forward.py"), forwards=(Forward(8123, sock),))
    line = argv.command(["claude", "-p"], "/")
    tail = line[line.index("--chdir") + 3 :]
    assert tail == [
        sys.executable,
        "-I",
        "-S",
        "/x/forward.py",
        f"8123={sock}",
        "--",
        "claude",
        "-p",
    ]


def test_a_command_steps_layout_has_a_home_of_its_own_and_may_write_git(tmp_path):
    (tmp_path / "wt" / ".git").mkdir(parents=True)
    home = Path("/home/ade-test-user")
    argv = layout(tmp_path, home=home, git_writable=True).command(["true"], "/")
    git = str(tmp_path / "wt" / ".git")
    assert ["--size", str(HOME_SIZE), "--tmpfs", str(home)] == argv[argv.index(str(home)) - 3 :][:4]
    assert argv[argv.index(git) - 1] == "--bind"
    read_only = layout(tmp_path).command(["true"], "/")
    assert read_only[read_only.index(git) - 1] == "--ro-bind"


def test_a_home_in_tmp_is_made_there_and_one_in_the_system_or_worktree_is_left_alone(tmp_path):
    argv = layout(tmp_path, home=Path("/tmp/home")).command(["true"], "/")
    assert argv[argv.index("/tmp/home") - 1] == "--dir"
    for home in (Path("/"), Path("/usr/local"), tmp_path / "wt" / "home"):
        argv = layout(tmp_path, home=home).command(["true"], "/")
        assert str(home) not in argv[argv.index("--proc") :][:-3], home


def test_a_launched_supervisor_runs_the_engines_copy_inside(tmp_path):
    copy = tmp_path / "helpers" / "supervisor.py"
    argv = layout(tmp_path).launch(copy, 7)
    assert argv[-5:] == [sys.executable, "-I", "-S", str(copy), "7"]
    assert ["--ro-bind", str(copy.parent), str(copy.parent)] == argv[
        argv.index(str(copy.parent)) - 1 :
    ][:3]


@needs_bwrap
def test_commands_in_an_equal_sandbox_share_one_and_another_sandbox_is_apart(tmp_path):
    """The supervisor lives inside: the next command in an equal sandbox finds what the last one
    left in /tmp; a command in another sandbox (no network) does not."""
    (tmp_path / "wt").mkdir()
    settings = Settings(data_dir=tmp_path / "data")

    def run(network: str, command: str) -> str:
        sandbox = command_sandbox(
            settings,
            tmp_path / "wt",
            network=network,
            untrusted=False,
            home=None,
            what="t",  # type: ignore[arg-type]
        )
        env = {"PATH": "/usr/bin:/bin"}
        return run_process(
            ["sh", "-c", command], cwd=tmp_path / "wt", env=env, timeout=30, sandbox=sandbox
        ).output

    run("host", "echo left > /tmp/mark")
    assert run("host", "cat /tmp/mark") == "left\n"
    assert "No such file" in run("none", "cat /tmp/mark")
    # The supervisor (and bwrap's init) hold none of the worker's environment.
    environ = run("host", "cat /proc/1/environ /proc/2/environ | tr '\\0' '\\n'")
    assert set(environ.split()) <= {"PWD=/"}, environ


@needs_bwrap
def test_a_worktree_made_again_at_the_same_path_gets_a_fresh_sandbox(tmp_path):
    # A lane deleted and created again under its name: a kept sandbox still binds the old one.
    worktree = tmp_path / "lane"
    outputs = []
    for content in ("first", "second"):
        shutil.rmtree(worktree, ignore_errors=True)
        worktree.mkdir()
        (worktree / "f").write_text(content)
        sandbox = command_sandbox(
            Settings(data_dir=tmp_path / "data"), worktree, network="none", untrusted=False,
            home=None, what="t",
        )  # fmt: skip
        env = {"PATH": "/usr/bin:/bin"}
        outputs.append(
            run_process(["cat", "f"], cwd=worktree, env=env, timeout=30, sandbox=sandbox).output
        )
    assert outputs == ["first", "second"]


def test_engine_paths_hold_its_packages_virtualenv_and_data(tmp_path):
    settings = Settings(data_dir=tmp_path / "data")
    (tmp_path / "wt" / "sub" / ".ade").mkdir(parents=True)
    paths = engine_paths(settings, tmp_path / "wt")
    names = {p.name for p in paths}
    assert {"ade_tasks", "ade_workers", "ade_api"} <= names
    assert (tmp_path / "data").resolve() in paths
    assert (tmp_path / "wt" / "sub" / ".ade").resolve() in paths
    if sys.prefix != sys.base_prefix:
        assert Path(sys.prefix).resolve() in paths


def test_no_bwrap_refuses_with_what_the_host_needs_and_the_opt_out(monkeypatch, tmp_path):
    host.sandbox_problem.cache_clear()
    monkeypatch.setenv("PATH", str(tmp_path))  # no bwrap on it
    try:
        with pytest.raises(host.SandboxUnavailable) as refused:
            agent_sandbox(Settings(), tmp_path, "agent step 'fix'")
    finally:
        host.sandbox_problem.cache_clear()
    message = refused.value.message
    assert message.startswith("agent step 'fix' runs only in a sandbox")
    assert "apt-get install bubblewrap" in message and "ADE_SANDBOX=off" in message


def test_sandbox_off_makes_none(tmp_path):
    assert agent_sandbox(Settings(sandbox="off"), tmp_path, "x") is None


def test_a_helper_copy_holds_the_engines_bytes_and_is_rewritten_when_changed(tmp_path):
    source = tmp_path / "hook.py"
    source.write_text("print('engine')\n")
    helper = helpers.register(source)
    source.write_text("print('agent')\n")  # the source tree changed after the worker started
    copy = helper.installed()
    assert copy.read_text() == "print('engine')\n"
    assert copy.stat().st_mode & 0o777 == 0o444
    copy.chmod(0o644)
    copy.write_text("print('tampered')\n")
    assert helper.installed().read_text() == "print('engine')\n"
    assert not str(copy).startswith(str(Path(helpers.__file__).parents[2]))


@needs_bwrap
def test_the_forwarder_forwards_a_port_inside_to_a_unix_socket_outside(tmp_path):
    with socket.create_server(("127.0.0.1", 0)) as upstream:
        port = upstream.getsockname()[1]

        def answer() -> None:
            conn, _ = upstream.accept()
            with conn:
                conn.sendall(b"pong:" + conn.recv(100))

        threading.Thread(target=answer, daemon=True).start()
        sock = tmp_path / "s" / "up.sock"
        sock.parent.mkdir()
        base = agent_sandbox(Settings(), tmp_path, "test")
        assert base is not None
        sandbox = Sandbox(
            bwrap=base.bwrap, worktree=tmp_path, python=base.python, forwarder=FORWARDER.installed(),
            read_only=(sock.parent,), forwards=(Forward(port, sock),),
        )  # fmt: skip
        client = (
            f"import socket; s = socket.create_connection(('127.0.0.1', {port})); "
            "s.sendall(b'ping'); print(s.recv(100).decode())"
        )
        with UnixBridge(sock, ("127.0.0.1", port)):
            done = subprocess.run(
                sandbox.command([base.python, "-I", "-S", "-c", client], str(tmp_path)),
                capture_output=True, text=True, timeout=30,
            )  # fmt: skip
    assert done.stdout.strip() == "pong:ping", done.stderr


def test_a_dead_processes_scratch_directory_is_swept_and_a_live_ones_kept(tmp_path):
    mine = scratch.scratch_root()
    child = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(30)"], stdout=subprocess.DEVNULL
    )
    try:
        alive = tmp_path / f"{scratch.PREFIX}{child.pid}-{scratch.process_start(child.pid)}"
        alive.mkdir()
        dead = tmp_path / f"{scratch.PREFIX}{child.pid}-1"  # the same pid, another start
        (dead / "ade-claude-x").mkdir(parents=True)
        other = tmp_path / "ade-scratch-notapid"
        other.mkdir()
        assert scratch.sweep(tmp_path) == [dead]
        assert alive.is_dir() and other.is_dir() and not dead.exists()
    finally:
        child.kill()
        child.wait()
    assert scratch.sweep(tmp_path) == [alive]
    assert mine.is_dir() and mine not in scratch.sweep()
