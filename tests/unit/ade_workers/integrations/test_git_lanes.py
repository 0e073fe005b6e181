"""Lanes: worktrees on their own branches, made and removed in real temporary git repositories."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from ade_tasks.errors import AdeError
from ade_workers.integrations import git_lanes as lanes
from ade_workers.integrations.git_lanes import (
    DeleteResult,
    LaneError,
    changed_paths,
    create_lane,
    delete_lane,
    find_lane,
    git,
    name_allowed,
    paths_outside,
    predict_conflicts,
    require_repository,
    slugify,
)


@pytest.fixture(autouse=True)
def _hermetic_git(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The developer's global and system git config (signing, hooks, aliases) stay out."""
    empty = tmp_path / "gitconfig"
    empty.write_text("")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(empty))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")


def commit(repo: Path, files: dict[str, str], message: str = "change") -> str:
    """Write `files`, commit them all and return the new commit."""
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD").strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "project"
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    git(path, "config", "user.name", "Test")
    git(path, "config", "user.email", "test@example.com")
    commit(path, {"README.md": "hello\n", "src/app.py": "x = 1\n"}, "initial")
    return path.resolve()


@pytest.fixture
def lanes_root(tmp_path: Path) -> Path:
    return tmp_path / "lanes"


def branch_exists(repo: Path, branch: str) -> bool:
    return bool(git(repo, "branch", "--list", branch).strip())


# --- git() and require_repository ---------------------------------------------------------------


def test_git_failure_names_the_command_and_its_stderr(repo: Path) -> None:
    with pytest.raises(LaneError, match=r"`git -C .* rev-parse --verify nope` failed \(exit 128\)"):
        git(repo, "rev-parse", "--verify", "nope")


def test_git_ignores_a_leaked_git_dir(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given GIT_DIR pointing at another repository, as inside a git hook
    other = tmp_path / "other"
    other.mkdir()
    git(other, "init", "-q")
    monkeypatch.setenv("GIT_DIR", str(other / ".git"))
    # Then git still talks to the repository it was given
    assert git(repo, "rev-parse", "--show-toplevel").strip() == str(repo)


def test_require_repository_returns_the_top_level(repo: Path) -> None:
    assert require_repository(repo / "src") == repo


@pytest.mark.parametrize("exists", [True, False])
def test_a_plain_or_missing_directory_is_not_a_repository(tmp_path: Path, exists: bool) -> None:
    path = tmp_path / "plain"
    if exists:
        path.mkdir()
    with pytest.raises(LaneError, match="is not a git repository; set ADE_PROJECTS__") as caught:
        require_repository(path)
    assert isinstance(caught.value, AdeError)


# --- slugs and creation ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "slug"),
    [
        ("Fix Login!", "fix-login"),
        ("--force", "force"),
        ("a..b", "a.b"),
        ("../../etc", "etc"),
        ("Café au lait", "cafe-au-lait"),
        ("release.lock", "release-lock"),
        (".hidden.", "hidden"),
        ("x" * 100, "x" * lanes.SLUG_MAX),
    ],
)
def test_slugs_are_valid_branch_names(repo: Path, name: str, slug: str) -> None:
    assert slugify(name) == slug
    assert git(repo, "check-ref-format", "--branch", f"ade/{slug}").strip() == f"ade/{slug}"


def test_create_lane_from_head(repo: Path, lanes_root: Path) -> None:
    # Given a repository and a lanes root that does not exist yet
    head = git(repo, "rev-parse", "HEAD").strip()
    # When a lane is created
    lane = create_lane(repo, lanes_root, "Fix login")
    # Then it is a worktree on a new branch at HEAD, inside the created lanes root
    assert lane.name == "Fix login"
    assert lane.branch == "ade/fix-login"
    assert lane.path == lanes_root.resolve() / "fix-login"
    assert (lane.base_ref, lane.base_sha) == ("HEAD", head)
    assert git(lane.path, "branch", "--show-current").strip() == "ade/fix-login"
    assert (lane.path / "src" / "app.py").read_text() == "x = 1\n"


def test_create_lane_from_a_named_base(repo: Path, lanes_root: Path) -> None:
    # Given a release branch ahead of main
    git(repo, "switch", "-q", "-c", "release")
    release = commit(repo, {"CHANGELOG": "1.0\n"})
    git(repo, "switch", "-q", "main")
    # When a lane is based on it
    lane = create_lane(repo, lanes_root, "hotfix", base_ref="release", branch_prefix="bot/")
    # Then the lane starts at the release commit
    assert (lane.branch, lane.base_ref, lane.base_sha) == ("bot/hotfix", "release", release)
    assert (lane.path / "CHANGELOG").exists()


def test_unknown_base_ref_is_named_and_creates_nothing(repo: Path, lanes_root: Path) -> None:
    with pytest.raises(LaneError, match="base ref 'no-such-branch' is not a commit"):
        create_lane(repo, lanes_root, "x", base_ref="no-such-branch")
    assert not branch_exists(repo, "ade/x")
    assert not (lanes_root / "x").exists()


def test_a_name_without_letters_or_digits_is_refused(repo: Path, lanes_root: Path) -> None:
    with pytest.raises(LaneError, match="has no letters or digits"):
        create_lane(repo, lanes_root, "../..")


def test_colliding_names_get_counters(repo: Path, lanes_root: Path) -> None:
    made = [create_lane(repo, lanes_root, "Fix login") for _ in range(3)]
    assert [lane.name for lane in made] == ["Fix login", "Fix login (#2)", "Fix login (#3)"]
    assert [lane.branch for lane in made] == ["ade/fix-login", "ade/fix-login-2", "ade/fix-login-3"]
    assert [lane.path.name for lane in made] == ["fix-login", "fix-login-2", "fix-login-3"]


def test_counters_run_out_into_a_utc_timestamp(
    repo: Path, lanes_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lanes, "MAX_COUNTER", 2)
    create_lane(repo, lanes_root, "fix")
    create_lane(repo, lanes_root, "fix")
    third = create_lane(repo, lanes_root, "fix")
    assert re.fullmatch(r"fix \(\d{8}-\d{6}\)", third.name)
    assert re.fullmatch(r"ade/fix-\d{8}-\d{6}", third.branch)


@pytest.mark.parametrize("taken_by", ["branch", "directory", "stale worktree"])
def test_an_existing_branch_directory_or_worktree_is_a_collision(
    repo: Path, lanes_root: Path, taken_by: str
) -> None:
    # Given the slug "fix" already taken in one of three ways
    if taken_by == "branch":
        git(repo, "branch", "ade/fix")
    elif taken_by == "directory":
        (lanes_root / "fix").mkdir(parents=True)
    else:  # registered, directory gone: `git worktree add` would refuse the path
        git(repo, "worktree", "add", "-q", "--detach", str(lanes_root / "fix"))
        shutil.rmtree(lanes_root / "fix")
    # When a lane named "fix" is created
    lane = create_lane(repo, lanes_root, "fix")
    # Then it gets the next name
    assert (lane.name, lane.branch, lane.path.name) == ("fix (#2)", "ade/fix-2", "fix-2")


def test_a_path_like_name_stays_inside_the_lanes_root(repo: Path, lanes_root: Path) -> None:
    lane = create_lane(repo, lanes_root, "../../etc")
    assert lane.path.parent == lanes_root.resolve()
    assert (lane.name, lane.branch) == ("../../etc", "ade/etc")


# --- find_lane ---------------------------------------------------------------------------------


def test_find_lane_by_display_name_or_slug(repo: Path, lanes_root: Path) -> None:
    first = create_lane(repo, lanes_root, "Fix login")
    second = create_lane(repo, lanes_root, "Fix login")
    assert find_lane(repo, lanes_root, "Fix login") == first
    assert find_lane(repo, lanes_root, "fix-login") == first
    assert find_lane(repo, lanes_root, "Fix login (#2)") == second
    assert find_lane(repo, lanes_root, "fix-login-2") == second
    assert find_lane(repo, lanes_root, "nothing") is None


def test_find_lane_ignores_worktrees_outside_the_lanes_root(
    repo: Path, lanes_root: Path, tmp_path: Path
) -> None:
    create_lane(repo, tmp_path / "elsewhere", "fix")
    assert find_lane(repo, lanes_root, "fix") is None


# --- delete_lane -------------------------------------------------------------------------------


def test_delete_a_clean_lane(repo: Path, lanes_root: Path) -> None:
    lane = create_lane(repo, lanes_root, "fix")
    result = delete_lane(repo, lane.path, lane.branch)
    assert (result.removed_worktree, result.removed_branch, result.removed_remote) == (
        True,
        True,
        False,
    )
    assert not lane.path.exists()
    assert not branch_exists(repo, lane.branch)
    assert find_lane(repo, lanes_root, "fix") is None
    # git branch -D took the lane's metadata with it
    assert "adelane" not in git(repo, "config", "--list", "--local")


def test_deleting_a_lane_already_gone_is_a_no_op(repo: Path, lanes_root: Path) -> None:
    result = delete_lane(repo, lanes_root / "never", "ade/never")
    assert result == DeleteResult(False, False, False, "already gone")


def test_a_dirty_lane_is_refused_then_forced(repo: Path, lanes_root: Path) -> None:
    # Given a lane with a modified tracked file and an untracked one
    lane = create_lane(repo, lanes_root, "fix")
    (lane.path / "README.md").write_text("changed\n")
    (lane.path / "notes.txt").write_text("draft\n")
    # When it is deleted without force, then it is refused and kept
    with pytest.raises(LaneError, match=r"README\.md, notes\.txt; .*pass force: true"):
        delete_lane(repo, lane.path, lane.branch)
    assert (lane.path / "notes.txt").exists()
    assert branch_exists(repo, lane.branch)
    # When forced, then everything goes
    result = delete_lane(repo, lane.path, lane.branch, force=True)
    assert result.removed_worktree and result.removed_branch
    assert not lane.path.exists()


def test_the_dirty_list_is_capped_at_ten(repo: Path, lanes_root: Path) -> None:
    lane = create_lane(repo, lanes_root, "fix")
    for i in range(12):
        (lane.path / f"f{i:02}.txt").write_text("x")
    with pytest.raises(LaneError, match=r"f09\.txt \(and 2 more\)"):
        delete_lane(repo, lane.path, lane.branch)


def test_a_deletion_that_crashed_after_removing_the_worktree_is_completed(
    repo: Path, lanes_root: Path
) -> None:
    # Given a crash between `git worktree remove` and `git branch -D`
    lane = create_lane(repo, lanes_root, "fix")
    git(repo, "worktree", "remove", str(lane.path))
    # When deletion is called again, then it finishes the branch
    result = delete_lane(repo, lane.path, lane.branch)
    assert (result.removed_worktree, result.removed_branch) == (False, True)
    assert not branch_exists(repo, lane.branch)


def test_a_worktree_whose_directory_vanished_is_pruned(repo: Path, lanes_root: Path) -> None:
    lane = create_lane(repo, lanes_root, "fix")
    shutil.rmtree(lane.path)
    result = delete_lane(repo, lane.path, lane.branch)
    assert (result.removed_worktree, result.removed_branch) == (True, True)
    assert str(lane.path) not in git(repo, "worktree", "list", "--porcelain")


def test_a_directory_that_is_not_a_worktree_is_never_deleted(repo: Path, lanes_root: Path) -> None:
    stray = lanes_root / "stray"
    stray.mkdir(parents=True)
    with pytest.raises(LaneError, match="is not a worktree of"):
        delete_lane(repo, stray, "ade/stray")
    assert stray.exists()


def test_the_main_checkout_is_never_deleted(repo: Path) -> None:
    with pytest.raises(LaneError, match="is the main checkout"):
        delete_lane(repo, repo, "main", force=True)


def test_delete_the_remote_branch_too(repo: Path, lanes_root: Path, tmp_path: Path) -> None:
    # Given a bare repository as remote holding the lane's branch
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(remote))
    git(repo, "remote", "add", "origin", str(remote))
    lane = create_lane(repo, lanes_root, "fix")
    git(repo, "push", "-q", "origin", lane.branch)
    # When the lane is deleted with its remote
    result = delete_lane(repo, lane.path, lane.branch, remote="origin")
    # Then the remote branch is gone, and a second call finds nothing left to do
    assert result.removed_remote
    # (--git-dir: the engine's git never discovers a bare repository by itself)
    assert git(tmp_path, "--git-dir", str(remote), "branch", "--list", lane.branch).strip() == ""
    again = delete_lane(repo, lane.path, lane.branch, remote="origin")
    assert again == DeleteResult(False, False, False, "already gone")


# --- predict_conflicts -------------------------------------------------------------------------


def test_predict_conflicts_clean(repo: Path, lanes_root: Path) -> None:
    lane = create_lane(repo, lanes_root, "fix")
    commit(lane.path, {"src/new.py": "y = 2\n"})
    commit(repo, {"README.md": "hello again\n"})
    assert predict_conflicts(repo, lane.branch, "main") == []


def test_predict_conflicts_lists_conflicting_files(repo: Path, lanes_root: Path) -> None:
    lane = create_lane(repo, lanes_root, "fix")
    commit(lane.path, {"src/app.py": "x = 2\n", "my file.txt": "lane\n", "ok.txt": "a\n"})
    commit(repo, {"src/app.py": "x = 3\n", "my file.txt": "main\n"})
    assert predict_conflicts(repo, lane.branch, "main") == ["my file.txt", "src/app.py"]


def test_predict_conflicts_names_an_unknown_ref(repo: Path) -> None:
    with pytest.raises(LaneError, match="branch 'ade/nope' is not a commit"):
        predict_conflicts(repo, "ade/nope", "main")


# --- changed_paths -----------------------------------------------------------------------------


def test_changed_paths_covers_every_kind_of_change(repo: Path, lanes_root: Path) -> None:
    # Given a lane with a commit of its own, then modified, renamed, untracked and odd names
    lane = create_lane(repo, lanes_root, "fix")
    commit(lane.path, {"docs/committed.md": "c\n"})
    (lane.path / "src" / "app.py").write_text("x = 9\n")
    git(lane.path, "mv", "README.md", "READ ME.md")
    (lane.path / "deep" / "dir").mkdir(parents=True)
    (lane.path / "deep" / "dir" / "new line\n.txt").write_text("u\n")
    # Then the working changes are listed, and the commit too when a base is given
    working = ["READ ME.md", "README.md", "deep/dir/new line\n.txt", "src/app.py"]
    assert changed_paths(lane.path) == working
    assert changed_paths(lane.path, base="main") == sorted([*working, "docs/committed.md"])


def test_changed_paths_of_a_clean_lane_is_empty(repo: Path, lanes_root: Path) -> None:
    lane = create_lane(repo, lanes_root, "fix")
    assert changed_paths(lane.path, base="main") == []


# --- paths_outside and name_allowed ------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "globs", "outside"),
    [
        ("src/a/b/c.py", ["src/**"], False),
        ("src", ["src/**"], True),
        ("src/ab/x", ["src/a/**"], True),
        ("src/a/x", ["src/a/**"], False),
        ("src/x.py", ["src/*.py"], False),
        ("src/sub/x.py", ["src/*.py"], True),
        ("x.py", ["**/*.py"], False),
        ("a/b/x.py", ["**/*.py"], False),
        ("a/b/c", ["a/**/c"], False),
        ("a/c", ["a/**/c"], False),
        ("a1", ["a?"], False),
        ("a/", ["a?"], True),
        ("src/../etc/passwd", ["src/**"], True),
        ("/etc/passwd", ["**"], True),
        ("[x].txt", ["[x].txt"], False),
        ("anything/at/all", [], False),
    ],
)
def test_paths_outside(path: str, globs: list[str], outside: bool) -> None:
    assert paths_outside([path], globs) == ([path] if outside else [])


def test_paths_outside_keeps_input_order() -> None:
    assert paths_outside(["z", "src/ok", "a"], ["src/**"]) == ["z", "a"]


@pytest.mark.parametrize(
    ("name", "globs", "allowed"),
    [("fix-login", [], True), ("fix-login", ["fix-*"], True), ("feat", ["fix-*", "bot*"], False)],
)
def test_name_allowed(name: str, globs: list[str], allowed: bool) -> None:
    assert name_allowed(name, globs) is allowed
