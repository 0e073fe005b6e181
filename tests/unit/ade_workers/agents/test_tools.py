"""The engine's agent tools stay inside the worktree and fail as readable results, never crashes."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from ade_tasks.agents.protected import ProtectedPaths
from ade_tasks.secrets import Masker
from ade_tasks.settings import Settings
from ade_workers.agents.tools import github, notes, notify, reading, shell, writing
from ade_workers.agents.tools.reading import READ_CAP
from ade_workers.agents.tools.registry import TOOL_SPECS, TOOLS, checked_args, run_tool
from ade_workers.agents.tools.tool import ToolContext

ENV = {"PATH": os.environ["PATH"]}


def wait_dead(pid: int, deadline: float = 5.0) -> bool:
    """Is `pid` gone (or a zombie) within `deadline` seconds?"""
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                if stat.read().split(") ")[1][0] == "Z":
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def lane(tmp_path: Path) -> Path:
    """A worktree at <tmp>/w/lane with a sibling <tmp>/w/lane2 and a secret outside both."""
    root = tmp_path / "w" / "lane"
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("import os\n\ndef main():\n    return 1\n")
    (root / "README.md").write_text("# demo\nhello world\n")
    (tmp_path / "w" / "lane2").mkdir()
    (tmp_path / "w" / "lane2" / "secret.txt").write_text("sibling secret\n")
    (tmp_path / "outside.txt").write_text("outside secret\n")
    return root


@pytest.fixture
def ctx(lane: Path) -> ToolContext:
    return ToolContext(worktree=lane, env=ENV, kill_grace=0.5)


# --- path containment ----------------------------------------------------------------------


def escape_corpus(lane: Path) -> list[str]:
    (lane / "link_out").symlink_to(lane.parent.parent / "outside.txt")
    (lane / "chain_a").symlink_to("chain_b")
    (lane / "chain_b").symlink_to("../lane2/secret.txt")
    (lane / "dir_out").symlink_to(lane.parent / "lane2")
    return [
        "../../etc/passwd",
        "/etc/passwd",
        "link_out",
        "chain_a",
        "../lane2/secret.txt",
        "dir_out/secret.txt",
        "src/../../lane2/secret.txt",
    ]


@pytest.mark.parametrize("index", range(7))
@pytest.mark.parametrize(
    ("tool", "extra"),
    [
        ("read_file", {}),
        ("list_dir", {}),
        ("grep", {"pattern": "secret"}),
        ("write_file", {"content": "pwned"}),
        ("edit_file", {"old": "secret", "new": "pwned"}),
    ],
)
def test_every_escape_is_refused(
    lane: Path, ctx: ToolContext, index: int, tool: str, extra: dict[str, str]
) -> None:
    # Given a path leaving the worktree by .., absolute path, symlink, chain or sibling prefix
    path = escape_corpus(lane)[index]
    # When a tool is asked to use it
    result = run_tool(tool, {"path": path, **extra}, ctx)
    # Then it is refused as a tool error and nothing outside changed
    assert not result.ok
    assert "absolute" in result.content or "outside" in result.content
    assert "sibling secret" not in result.content and "outside secret" not in result.content
    assert (lane.parent / "lane2" / "secret.txt").read_text() == "sibling secret\n"
    assert (lane.parent.parent / "outside.txt").read_text() == "outside secret\n"


def test_walks_skip_symlinks_leading_out(lane: Path, ctx: ToolContext) -> None:
    escape_corpus(lane)
    grep = run_tool("grep", {"pattern": "secret"}, ctx)
    found = run_tool("glob", {"pattern": "**"}, ctx)
    assert grep.ok and grep.content == "[no matches]"
    assert "link_out" not in found.content and "chain_a" not in found.content


# --- the engine's own data ------------------------------------------------------------------

TOKEN = "ade_tok_0123456789abcdef"


@pytest.fixture
def dev_lane(lane: Path) -> Path:
    """The worktree holding dev mode's data, plus a symlink to it and a nested project's."""
    (lane / ".ade").mkdir()
    (lane / ".ade" / "api-token").write_text(TOKEN + "\n")
    (lane / ".ade" / "ade.db").write_text(f"db {TOKEN}\n")
    (lane / "src" / "sub" / ".ade").mkdir(parents=True)
    (lane / "src" / "sub" / ".ade" / "api-token").write_text(TOKEN + "\n")
    (lane / "token_link").symlink_to(lane / ".ade" / "api-token")
    (lane / "data_link").symlink_to(lane / ".ade")
    return lane


@pytest.mark.parametrize(
    "path",
    [".ade/api-token", ".ade", "token_link", "data_link/ade.db", "src/sub/.ade/api-token",
     "src/../.ade/api-token", ".ADE/api-token"],
)  # fmt: skip
@pytest.mark.parametrize(
    ("tool", "extra"),
    [
        ("read_file", {}),
        ("list_dir", {}),
        ("grep", {"pattern": "ade_tok"}),
        ("write_file", {"content": "x"}),
        ("edit_file", {"old": "ade", "new": "x"}),
    ],
)
def test_the_engine_data_is_refused_by_every_tool(
    dev_lane: Path, ctx: ToolContext, path: str, tool: str, extra: dict[str, str]
) -> None:
    # When a tool names the engine's data, directly, by symlink or by a detour
    result = run_tool(tool, {"path": path, **extra}, ctx)
    # Then it is refused as such and nothing is shown or changed
    assert not result.ok
    assert "the engine's own data" in result.content and TOKEN not in result.content
    assert (dev_lane / ".ade" / "api-token").read_text() == TOKEN + "\n"


def test_searches_and_listings_leave_the_engine_data_out(dev_lane: Path, ctx: ToolContext) -> None:
    grep = run_tool("grep", {"pattern": "ade_tok"}, ctx)
    found = run_tool("glob", {"pattern": "**"}, ctx)
    listing = run_tool("list_dir", {}, ctx)
    assert (grep.ok, grep.content) == (True, "[no matches]")
    assert ".ade" not in found.content and "token_link" not in found.content
    assert "src/app.py" in found.content
    assert ".ade/" not in listing.content.split("\n") and "data_link" not in listing.content
    assert "README.md" in listing.content


def test_the_token_of_a_dev_stack_in_the_worktree_is_masked(
    dev_lane: Path, ctx: ToolContext
) -> None:
    result = run_tool("bash", {"command": "cat .ade/api-token; echo done"}, ctx)
    assert TOKEN not in result.content and "***" in result.content


def test_settings_protect_a_data_dir_and_mask_the_engine_credentials(
    lane: Path, tmp_path: Path
) -> None:
    # Given a data dir named otherwise inside the worktree and credentials in settings
    (lane / "state").mkdir()
    (lane / "state" / "api-token").write_text("dev-token-value\n")
    settings = Settings(
        data_dir=lane / "state",
        api_token="api-token-value",
        github={"token": "ghp_value"},
        providers={"openai": {"api_key": "sk-value"}},
        database_url="postgresql+psycopg://ade:pg-password@db/ade",
    )
    ctx = ToolContext(
        worktree=lane, env=ENV, protected=ProtectedPaths.from_settings(settings, lane)
    )

    # When a tool reads the data dir, and a command prints every credential
    read = run_tool("read_file", {"path": "state/api-token"}, ctx)
    values = "dev-token-value api-token-value ghp_value sk-value pg-password"
    printed = run_tool("bash", {"command": f"echo {values}"}, ctx)

    # Then the read is refused and the command's output is masked
    assert not read.ok and "the data directory" in read.content
    assert printed.content == "*** *** *** *** ***\n[exit code 0]"
    assert "api-token-value" not in repr(ctx.protected)


def test_a_lane_inside_the_data_dir_is_searched_but_the_data_dir_is_not(tmp_path: Path) -> None:
    # Given the default layout: the worktree is a lane under <data dir>/lanes/<project>
    data = tmp_path / ".ade"
    lane = data / "lanes" / "default" / "fix"
    (lane / "src").mkdir(parents=True)
    (lane / "src" / "a.py").write_text("x = 1\n")
    (data / "api-token").write_text(TOKEN + "\n")
    protected = ProtectedPaths.from_settings(Settings(data_dir=data), lane)
    ctx = ToolContext(worktree=lane, env=ENV, protected=protected)
    # When the agent globs and greps its lane
    found = run_tool("glob", {"pattern": "**/*.py"}, ctx)
    grep = run_tool("grep", {"pattern": "x = 1"}, ctx)
    # Then its own files are there
    assert (found.content, grep.content) == ("src/a.py", "src/a.py:1: x = 1")


def test_a_path_with_a_nul_byte_is_a_clear_error(ctx: ToolContext) -> None:
    result = run_tool("read_file", {"path": "README.md\x00.txt"}, ctx)
    assert not result.ok and "contains a NUL byte" in result.content


# --- read-only tools -----------------------------------------------------------------------


def test_read_file_numbers_a_line_range(ctx: ToolContext) -> None:
    result = run_tool("read_file", {"path": "src/app.py", "start_line": 3, "end_line": 4}, ctx)
    assert result.ok
    assert result.content == "     3\tdef main():\n     4\t    return 1\n"
    assert result.data["end_line"] == 4


def test_read_file_caps_large_files(lane: Path, ctx: ToolContext) -> None:
    (lane / "big.txt").write_text("x" * 99 + "\n" * 1 + ("y" * 99 + "\n") * 5_000)
    result = run_tool("read_file", {"path": "big.txt"}, ctx)
    assert result.ok and result.data["truncated"]
    assert len(result.content) < READ_CAP + 200
    assert f"start_line={result.data['end_line'] + 1}" in result.content


def test_read_file_refuses_binary_and_directories(lane: Path, ctx: ToolContext) -> None:
    (lane / "blob.bin").write_bytes(b"\x00\x01\x02")
    assert "binary" in run_tool("read_file", {"path": "blob.bin"}, ctx).content
    assert "not a file" in run_tool("read_file", {"path": "src"}, ctx).content


def test_list_dir_marks_directories(ctx: ToolContext) -> None:
    result = run_tool("list_dir", {}, ctx)
    assert result.ok and result.content == "README.md\nsrc/"


def test_glob_uses_rule_glob_semantics(lane: Path, ctx: ToolContext) -> None:
    (lane / "src" / "sub").mkdir()
    (lane / "src" / "sub" / "deep.py").write_text("")
    (lane / ".git").mkdir()
    (lane / ".git" / "x.py").write_text("")
    assert run_tool("glob", {"pattern": "src/*.py"}, ctx).data["matches"] == ["src/app.py"]
    assert run_tool("glob", {"pattern": "**/*.py"}, ctx).data["matches"] == [
        "src/app.py",
        "src/sub/deep.py",
    ]


def test_grep_finds_lines_with_glob_filter_and_skips_binary(lane: Path, ctx: ToolContext) -> None:
    (lane / "blob.bin").write_bytes(b"hello\x00world")
    (lane / ".git").mkdir()
    (lane / ".git" / "config").write_text("hello\n")
    everywhere = run_tool("grep", {"pattern": r"hel+o"}, ctx)
    only_py = run_tool("grep", {"pattern": "o|1", "glob": "**/*.py"}, ctx)
    assert everywhere.content == "README.md:2: hello world"
    assert only_py.content.splitlines() == ["src/app.py:1: import os", "src/app.py:4:     return 1"]


def test_grep_reports_a_bad_regex(ctx: ToolContext) -> None:
    result = run_tool("grep", {"pattern": "("}, ctx)
    assert not result.ok and "not a valid RE2 regex" in result.content


def test_grep_caps_matches(lane: Path, ctx: ToolContext) -> None:
    (lane / "many.txt").write_text("hit\n" * 1_000)
    result = run_tool("grep", {"pattern": "hit"}, ctx)
    assert result.data["truncated"] and result.data["count"] == 200


# --- writes --------------------------------------------------------------------------------


def test_write_file_creates_parents(lane: Path, ctx: ToolContext) -> None:
    result = run_tool("write_file", {"path": "new/dir/a.txt", "content": "hi"}, ctx)
    assert result.ok and (lane / "new" / "dir" / "a.txt").read_text() == "hi"


def test_write_file_refuses_git_internals(lane: Path, ctx: ToolContext) -> None:
    result = run_tool("write_file", {"path": ".git/hooks/pre-commit", "content": "x"}, ctx)
    assert not result.ok and ".git" in result.content
    assert not (lane / ".git").exists()


def test_edit_file_replaces_the_single_occurrence(lane: Path, ctx: ToolContext) -> None:
    result = run_tool(
        "edit_file", {"path": "src/app.py", "old": "return 1", "new": "return 2"}, ctx
    )
    assert result.ok and "return 2" in (lane / "src" / "app.py").read_text()


@pytest.mark.parametrize(("old", "count"), [("nowhere", 0), ("o", 3)])
def test_edit_file_refuses_missing_or_ambiguous_text(
    lane: Path, ctx: ToolContext, old: str, count: int
) -> None:
    before = (lane / "README.md").read_text()
    result = run_tool("edit_file", {"path": "README.md", "old": old, "new": "X"}, ctx)
    assert not result.ok
    assert f"occurs {count} times" in result.content
    assert (lane / "README.md").read_text() == before


# --- bash ----------------------------------------------------------------------------------


def test_bash_runs_in_the_worktree_with_only_the_given_env(
    ctx: ToolContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOST_ONLY", "leak")
    result = run_tool("bash", {"command": "ls; echo ${HOST_ONLY:-unset}; exit 3"}, ctx)
    assert not result.ok and result.data["exit_code"] == 3
    assert result.content == "README.md\nsrc\nunset\n[exit code 3]"


def test_bash_timeout_kills_everything_the_command_started(lane: Path, ctx: ToolContext) -> None:
    # Given a command whose background grandchild would outlive it
    command = "(sleep 30; touch survived) & echo $! > bg.pid; sleep 30"
    started = time.monotonic()
    result = run_tool("bash", {"command": command, "timeout_sec": 0.5}, ctx)
    assert result.data["timed_out"] and not result.ok
    assert result.content.endswith(
        "[timed out after 0.5s; everything the command started was killed]"
    )
    assert time.monotonic() - started < 10
    bg = int((lane / "bg.pid").read_text())
    assert wait_dead(bg), f"background process {bg} outlived the timeout"


def test_bash_timeout_is_bounded_by_the_session_time_left(lane: Path) -> None:
    ctx = ToolContext(worktree=lane, env=ENV, kill_grace=0.1, time_left=lambda: 0.3)
    result = run_tool("bash", {"command": "sleep 10", "timeout_sec": 60}, ctx)
    assert result.data["timed_out"]


def test_bash_output_is_masked(lane: Path) -> None:
    ctx = ToolContext(
        worktree=lane, env={**ENV, "TOKEN": "s3cr3t-value"}, masker=Masker(["s3cr3t-value"])
    )
    result = run_tool("bash", {"command": 'echo "token=$TOKEN"'}, ctx)
    assert result.ok and result.content == "token=***\n[exit code 0]"


# --- todo, report --------------------------------------------------------------------------


def test_todo_keeps_the_list(ctx: ToolContext) -> None:
    items = [{"content": "read", "status": "done"}, {"content": "fix"}]
    result = run_tool("todo", {"items": items}, ctx)
    assert result.content == "[x] read\n[ ] fix"
    assert ctx.todos == [
        {"content": "read", "status": "done"},
        {"content": "fix", "status": "pending"},
    ]


def test_report_stores_validated_output(ctx: ToolContext) -> None:
    finding = {"severity": "warning", "path": "src/./app.py", "line": 4, "message": " magic "}
    args = {"summary": "done", "findings": [finding], "confidence": 0.8}
    result = run_tool("report", args, ctx)
    assert result.ok
    assert ctx.report == {
        "summary": "done",
        "findings": [{"severity": "warning", "path": "src/app.py", "line": 4, "message": "magic"}],
        "confidence": 0.8,
    }


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        ({"summary": "  "}, "summary is empty"),
        ({"summary": "s", "confidence": 2}, "confidence must be between 0 and 1"),
        (
            {"summary": "s", "findings": [{"severity": "fatal", "message": "m"}]},
            "findings[0].severity",
        ),
        (
            {"summary": "s", "findings": [{"severity": "info", "message": ""}]},
            "findings[0].message",
        ),
        ({"summary": "s", "findings": [{"severity": "info", "message": "m", "line": 0}]}, "line"),
        (
            {"summary": "s", "findings": [{"severity": "info", "message": "m", "path": "/etc"}]},
            "absolute",
        ),
        ({"summary": "s", "findings": ["oops"]}, "findings[0] must be an object"),
    ],
)
def test_report_rejects_invalid_output(
    ctx: ToolContext, args: dict[str, object], problem: str
) -> None:
    result = run_tool("report", args, ctx)
    assert not result.ok and problem in result.content
    assert ctx.report is None


# --- dispatch ------------------------------------------------------------------------------


def test_every_tool_has_a_spec() -> None:
    assert set(TOOL_SPECS) == {*TOOLS, "ask_user"}  # the session answers ask_user itself
    for spec in TOOL_SPECS.values():
        assert spec["description"] and spec["parameters"]["type"] == "object"


def test_each_tool_family_registers_its_own_tools_once() -> None:
    # Given the tool families, each with its tools and their specs
    families = (reading, writing, shell, notes, github, notify)

    # Then no two families describe one tool, and the registry holds all of their specs
    names = [name for family in families for name in family.SPECS]
    assert len(names) == len(set(names)) and set(names) == set(TOOL_SPECS)
    # And each registered tool is the function of the family that describes it
    for name, tool in TOOLS.items():
        family = next(f for f in families if name in f.SPECS)
        assert tool is getattr(family, name)


def test_arguments_that_fit_the_spec_come_back_checked() -> None:
    # Given arguments that fit read_file's spec, and some that do not
    fitting = {"path": "src/app.py", "start_line": 2}

    # Then the fitting ones come back as they are, the others as a reason naming the argument
    assert checked_args("read_file", fitting) == fitting
    assert (
        checked_args("read_file", ["src/app.py"])
        == "read_file takes an object of arguments, got list"
    )
    assert checked_args("read_file", {"path": 3}) == "read_file argument 'path' must be a string"


def test_unknown_tool_is_an_error_result(ctx: ToolContext) -> None:
    result = run_tool("rm_rf", {}, ctx)
    assert not result.ok and "unknown tool 'rm_rf'" in result.content


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        ({}, "missing the required argument 'path'"),
        ({"path": 3}, "argument 'path' must be a string"),
        ({"path": "a", "start_line": True}, "argument 'start_line' must be a integer"),
        ({"path": "a", "mode": "x"}, "has no argument 'mode'"),
        ("a", "takes an object of arguments"),
    ],
)
def test_bad_arguments_name_the_argument(ctx: ToolContext, args: object, problem: str) -> None:
    result = run_tool("read_file", args, ctx)
    assert not result.ok and problem in result.content


def test_exceptions_inside_a_tool_become_error_results(lane: Path, ctx: ToolContext) -> None:
    # Given a write under a regular file, which the OS refuses with an exception
    result = run_tool("write_file", {"path": "README.md/x", "content": "y"}, ctx)
    # Then the loop gets an error result naming it, and the file is intact
    assert not result.ok and "write_file failed: FileExistsError" in result.content
    assert (lane / "README.md").read_text() == "# demo\nhello world\n"
