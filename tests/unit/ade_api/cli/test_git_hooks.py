"""The git hooks ADE installs, run by real git against a fake `ade-tasks` that records its
arguments, and `hooks install` / `uninstall`, which leave another tool's hooks as they were."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from ade_api.cli import git_hooks, main

# --- git hooks ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", git_hooks.HOOK_NAMES)
def test_hook_scripts_are_valid_sh_that_background_the_emit_and_never_fail(name: str) -> None:
    script = git_hooks.hook_script(name, "/opt/ade tasks/bin/ade-tasks", "http://127.0.0.1:1")
    assert script.startswith("#!/bin/sh\n" + git_hooks.MARKER)
    assert "ade_tasks='/opt/ade tasks/bin/ade-tasks'" in script
    assert "--url http://127.0.0.1:1 --timeout 5" in script
    assert ") </dev/null >/dev/null 2>&1 &\nexit 0\n" in script
    checked = subprocess.run(["sh", "-n"], input=script, capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr


GIT_ENV = {
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_AUTHOR_NAME": "Ada",
    "GIT_AUTHOR_EMAIL": "ada@example.com",
    "GIT_COMMITTER_NAME": "Ada",
    "GIT_COMMITTER_EMAIL": "ada@example.com",
}


def git(cwd: Path, *args: str) -> str:
    env = {**os.environ, **GIT_ENV}
    done = subprocess.run(
        ["git", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.fixture
def fake_ade(tmp_path: Path) -> Path:
    """An `ade-tasks` that writes its arguments and stdin to calls/<pid>.json."""
    calls = tmp_path / "calls"
    calls.mkdir()
    script = tmp_path / "bin" / "ade-tasks"
    script.parent.mkdir()
    script.write_text(
        f"#!{sys.executable}\n"
        "import json, os, sys\n"
        f"out = os.path.join({str(calls)!r}, str(os.getpid()))\n"
        "data = {'argv': sys.argv[1:], 'stdin': sys.stdin.read()}\n"
        "open(out + '.tmp', 'w').write(json.dumps(data))\n"
        "os.rename(out + '.tmp', out + '.json')\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script


def recorded(fake: Path, count: int) -> list[dict[str, Any]]:
    """The calls of the fake, once `count` of them arrived (the hooks run in the background)."""
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        files = sorted((fake.parent.parent / "calls").glob("*.json"))
        if len(files) >= count:
            return [json.loads(f.read_text()) for f in files]
        time.sleep(0.05)
    raise AssertionError(f"the hook did not call ade-tasks {count} time(s) within 15s")


def options(argv: list[str]) -> dict[str, str]:
    return {argv[i]: argv[i + 1] for i in range(1, len(argv) - 1) if argv[i].startswith("--")}


def test_post_commit_emits_the_commit_with_its_paths_and_a_delivery_id_from_the_sha(
    tmp_path: Path, fake_ade: Path
) -> None:
    # Given a clone named `api` with the ADE hooks
    repo = tmp_path / "api"
    git(tmp_path, "init", "-q", "-b", "main", str(repo))
    git_hooks.install(repo, str(fake_ade), None, force=False)
    # When two commits are made
    (repo / "a b.txt").write_text("1")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "First commit")
    (repo / "src").mkdir()
    (repo / "src" / "x.py").write_text("2")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "Add x")
    # Then each emitted git.commit with the commit's own changed paths
    by_sha = {options(call["argv"])["--sha"]: call for call in recorded(fake_ade, 2)}
    shas = git(repo, "rev-list", "--reverse", "HEAD").split()
    for sha, title, paths in [
        (shas[0], "First commit", "a b.txt\0"),
        (shas[1], "Add x", "src/x.py\0"),
    ]:
        call = by_sha[sha]
        assert call["argv"][:2] == ["emit", "git.commit"]
        assert options(call["argv"]) == {
            "--timeout": "5", "--paths-from": "-", "--repo": "api", "--branch": "main",
            "--sha": sha, "--title": title, "--author": "Ada",
            "--delivery-id": f"git.commit:api:{sha}",
        }  # fmt: skip
        assert call["stdin"] == paths


def test_post_receive_emits_each_pushed_branch_and_skips_deletions(
    tmp_path: Path, fake_ade: Path
) -> None:
    # Given a bare server repository with the hooks and `ade.repo` set, and a clone of it
    server = tmp_path / "api.git"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(server))
    git(server, "config", "ade.repo", "acme/api")
    git_hooks.install(server, str(fake_ade), "http://127.0.0.1:9", force=False)
    clone = tmp_path / "clone"
    git(tmp_path, "init", "-q", "-b", "main", str(clone))
    (clone / "a.txt").write_text("1")
    git(clone, "add", ".")
    git(clone, "commit", "-q", "-m", "One")
    # When main is pushed new, then a commit on it, then a new branch; then that branch is
    # deleted in one push with another new branch (git sends the deletion first)
    git(clone, "push", "-q", str(server), "main")
    one = git(clone, "rev-parse", "HEAD")
    (clone / "b.txt").write_text("2")
    git(clone, "add", ".")
    git(clone, "commit", "-q", "-m", "Two")
    two = git(clone, "rev-parse", "HEAD")
    git(clone, "push", "-q", str(server), "main")
    git(clone, "push", "-q", str(server), "main:release/1")
    git(clone, "push", "-q", str(server), ":release/1", "main:zz-last")
    # Then one git.push per pushed branch: all paths of a new branch, the diff of an update;
    # none for the deletion
    calls = {call["argv"][-1]: call for call in recorded(fake_ade, 4)}
    new_main, main = (
        f"git.push:acme/api:refs/heads/main:{one}",
        f"git.push:acme/api:refs/heads/main:{two}",
    )
    release = f"git.push:acme/api:refs/heads/release/1:{two}"
    last = f"git.push:acme/api:refs/heads/zz-last:{two}"
    assert sorted(calls) == sorted([new_main, main, release, last])
    assert calls[new_main]["stdin"] == "a.txt\0"
    assert calls[main]["stdin"] == "b.txt\0"
    assert calls[release]["stdin"] == "a.txt\0b.txt\0"
    assert options(calls[release]["argv"]) == {
        "--url": "http://127.0.0.1:9", "--timeout": "5", "--paths-from": "-",
        "--repo": "acme/api", "--branch": "release/1", "--sha": two, "--title": "Two",
        "--author": "Ada", "--delivery-id": release,
    }  # fmt: skip


# --- hooks install / uninstall ------------------------------------------------------------


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "repo"
    git(tmp_path, "init", "-q", str(path))
    return path


def invoke(*args: str) -> Any:
    return CliRunner().invoke(main, list(args), env={"GIT_CONFIG_NOSYSTEM": "1"})


def test_install_writes_both_hooks_executable_and_names_the_repo(repo: Path) -> None:
    result = invoke("hooks", "install", str(repo))
    assert result.exit_code == 0, result.output
    for name in git_hooks.HOOK_NAMES:
        hook = repo / ".git" / "hooks" / name
        assert git_hooks.is_ade_hook(hook) and os.access(hook, os.X_OK)
        assert f"{name}: installed" in result.output
    assert "events carry repo 'repo'" in result.output
    assert invoke("hooks", "install", str(repo)).output.count(": updated") == 2


def test_another_tools_hook_is_kept_unless_forced_then_backed_up_and_restored(
    repo: Path,
) -> None:
    hook = repo / ".git" / "hooks" / "post-commit"
    hook.write_text("#!/bin/sh\necho theirs\n")
    refused = invoke("hooks", "install", str(repo))
    assert refused.exit_code == 2 and "--force" in refused.output
    assert hook.read_text() == "#!/bin/sh\necho theirs\n"
    assert not (repo / ".git" / "hooks" / "post-receive").exists()  # nothing half-installed

    forced = invoke("hooks", "install", str(repo), "--force")
    assert forced.exit_code == 0, forced.output
    assert git_hooks.is_ade_hook(hook)
    assert (repo / ".git" / "hooks" / "post-commit.ade-backup").read_text().endswith("theirs\n")

    removed = invoke("hooks", "uninstall", str(repo))
    assert removed.exit_code == 0
    assert hook.read_text() == "#!/bin/sh\necho theirs\n"
    assert not (repo / ".git" / "hooks" / "post-receive").exists()


def test_uninstall_leaves_a_hook_it_did_not_write(repo: Path) -> None:
    hook = repo / ".git" / "hooks" / "post-receive"
    hook.write_text("#!/bin/sh\n")
    result = invoke("hooks", "uninstall", str(repo))
    assert "post-receive: left alone (not an ADE hook)" in result.output
    assert hook.exists()


def test_a_path_that_is_no_repository_is_a_clear_error(tmp_path: Path) -> None:
    result = invoke("hooks", "install", str(tmp_path))
    assert result.exit_code == 2
    assert "is not a git repository" in result.output and "git init" in result.output
    missing = invoke("hooks", "install", str(tmp_path / "missing"))
    assert missing.exit_code == 2 and "not a directory" in missing.output
