"""The pure parts of the codex app-server client: its config, its rules, how codex's requests
and items become the engine's requests and run events; and ContainedProcess's opt-in pipes."""

from __future__ import annotations

import os
import stat
import tomllib
from pathlib import Path

from ade_workers.agents.cli.codex_home import (
    BASE_PROGRAMS,
    KEY_VARIABLE,
    exec_rules,
    program_names,
    session_config,
    write_session_home,
)
from ade_workers.agents.cli.codex_requests import approval_request, item_events
from ade_workers.containment.contained_process import ContainedProcess

WORKTREE = Path("/work/tree")


def test_the_config_points_codex_at_the_engine_provider_and_asks_for_approvals() -> None:
    config = tomllib.loads(
        session_config(model="gpt-x", base_url="http://127.0.0.1:1/v1", sandbox="read-only")
    )

    assert config["model"] == "gpt-x"
    assert config["model_provider"] == "ade"
    assert config["approval_policy"] == "on-request"
    assert config["approvals_reviewer"] == "user"
    assert config["sandbox_mode"] == "read-only"
    assert config["model_providers"]["ade"] == {
        "name": "ADE",
        "base_url": "http://127.0.0.1:1/v1",
        "env_key": KEY_VARIABLE,
        "wire_api": "responses",
        "request_max_retries": 0,
        "stream_max_retries": 0,
    }
    assert config["shell_environment_policy"] == {"inherit": "core"}
    assert "mcp_servers" not in config
    assert config["project_doc_max_bytes"] == 0
    assert config["features"]["hooks"] is False


def test_the_config_quotes_what_it_is_given() -> None:
    text = session_config(model='a"b\\c', base_url="http://x/\n", sandbox="workspace-write")

    assert tomllib.loads(text)["model"] == 'a"b\\c'


def test_the_rules_ask_for_every_program_named() -> None:
    rules = exec_rules(["cat", "ls", "cat"])

    assert 'prefix_rule(pattern=[["cat", "ls"]], decision="prompt"' in rules


def test_program_names_cover_path_the_worktree_and_the_base_list(tmp_path: Path) -> None:
    bin_dir, worktree = tmp_path / "bin", tmp_path / "tree"
    (worktree / "scripts").mkdir(parents=True)
    bin_dir.mkdir()
    (bin_dir / "tool-a").touch()
    (bin_dir / "bad name").touch()
    script = worktree / "scripts" / "run.sh"
    script.write_text("#!/bin/sh\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    (worktree / "notes.txt").write_text("not a program")

    names = program_names(f"{bin_dir}{os.pathsep}{tmp_path / 'missing'}", worktree)

    assert "tool-a" in names and "run.sh" in names
    assert "bad name" not in names and "notes.txt" not in names
    assert set(BASE_PROGRAMS) <= set(names)


def test_the_session_home_holds_config_rules_and_an_empty_home(tmp_path: Path) -> None:
    home = write_session_home(
        tmp_path / "ch", model="m", base_url="http://h/v1", sandbox="read-only", path="",
        worktree=tmp_path,
    )  # fmt: skip

    assert home == tmp_path / "ch" / "home" and list(home.iterdir()) == []
    assert (tmp_path / "ch" / "config.toml").is_file()
    assert "prefix_rule" in (tmp_path / "ch" / "rules" / "ade.rules").read_text()


def test_a_command_approval_becomes_a_command_request() -> None:
    params = {"itemId": "call_1", "command": "/bin/bash -lc 'cat /etc/passwd'", "cwd": "/w"}

    request = approval_request("item/commandExecution/requestApproval", params, {}, WORKTREE)

    assert request is not None
    assert (request.kind, request.id, request.cwd) == ("command", "call_1", "/w")
    assert request.argv == ("/bin/bash", "-lc", "cat /etc/passwd")
    assert request.paths == ()


def test_a_file_change_approval_names_the_paths_of_its_item_moves_included() -> None:
    items = {
        "call_2": {
            "type": "fileChange",
            "changes": [
                {"path": "/abs/a.txt", "kind": {"type": "add"}},
                {"path": "rel/b.txt", "kind": {"type": "update", "move_path": "../c.txt"}},
            ],
        }
    }

    request = approval_request(
        "item/fileChange/requestApproval", {"itemId": "call_2"}, items, WORKTREE
    )

    assert request is not None and request.kind == "file_change"
    assert request.paths == ("/abs/a.txt", "/work/tree/rel/b.txt", "/work/tree/../c.txt")


def test_other_server_requests_are_not_approvals() -> None:
    assert approval_request("item/tool/requestUserInput", {"itemId": "x"}, {}, WORKTREE) is None


def test_items_become_neutral_run_events() -> None:
    command = {"type": "commandExecution", "id": "c1", "command": "ls", "cwd": "/w"}
    done = {**command, "status": "completed", "aggregatedOutput": "a\n", "exitCode": 0}
    failed = {**command, "status": "declined", "aggregatedOutput": None, "exitCode": None}

    assert item_events(command, done=False) == [
        (
            "agent.tool_call",
            {"id": "c1", "name": "command_execution", "input": {"command": "ls", "cwd": "/w"}},
        )
    ]
    assert item_events(done, done=True) == [
        ("agent.tool_result", {"id": "c1", "output": "a\n", "exit_code": 0, "is_error": False})
    ]
    assert item_events(failed, done=True)[0][1]["is_error"] is True
    assert item_events({"type": "agentMessage", "id": "m", "text": "hi"}, done=True) == [
        ("agent.message", {"text": "hi"})
    ]
    assert item_events({"type": "agentMessage", "id": "m", "text": ""}, done=False) == []
    assert item_events({"type": "userMessage", "id": "u"}, done=True) == []
    unknown = item_events({"type": "mcpToolCall", "id": "t"}, done=False)
    assert unknown[0][0] == "agent.tool_call" and unknown[0][1]["name"] == "mcpToolCall"


def test_a_contained_process_can_take_stdin_and_keep_stderr_apart(tmp_path: Path) -> None:
    script = "read line; echo out:$line; echo err:$line >&2"
    env = {"PATH": os.environ["PATH"]}
    with ContainedProcess(
        ["sh", "-c", script], cwd=str(tmp_path), env=env, kill_grace=1, stdin=True,
        separate_stderr=True,
    ) as process:  # fmt: skip
        assert process.stdin is not None and process.stderr is not None
        process.stdin.write(b"hello\n")
        process.stdin.close()
        assert process.output.read() == b"out:hello\n"
        assert process.stderr.read() == b"err:hello\n"
        assert process.finish() == 0
        process.output.close()
        process.stderr.close()
