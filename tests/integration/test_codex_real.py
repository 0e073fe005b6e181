"""The real Codex CLI (npm, pinned in tests/agent_clis) driven over `codex app-server`.

Each test runs `run_codex_session` against a scripted Responses API server on 127.0.0.1 and
asserts what codex really did: files on disk, the requests the server saw (the key, the tool
outputs the model got back), and the processes left behind (none).
"""

from __future__ import annotations

import json
import os
import shlex
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from ade_tasks.agents.policy import Decision
from ade_tasks.settings import Settings
from ade_workers.agents.cli.codex_app_server import CodexOutcome, run_codex_session
from ade_workers.agents.cli.codex_home import KEY_VARIABLE, Sandbox
from ade_workers.agents.cli.codex_requests import CodexRequest
from ade_workers.sandbox.engine import agent_sandbox
from ade_workers.sandbox.layout import Sandbox as OsSandbox
from tests.fake_responses import ScriptedResponsesServer, Turn, Usage, add_file_patch
from tests.real_clis import real_cli
from tests.sandbox_escapes import Target, check_escapes, escape_script
from tests.support import child_pids, pid_alive

KEY = "sk-codex-test-key-0123456789abcdef"
MODEL = "gpt-5.5"  # a slug codex 0.169 knows, so it advertises its apply_patch tool


@dataclass
class Run:
    """One session's inputs and what it recorded."""

    worktree: Path
    codex_home: Path
    server: ScriptedResponsesServer
    verdict: Callable[[CodexRequest], Decision]
    requests: list[CodexRequest] = field(default_factory=list)
    events: list[tuple[float, str, dict[str, Any]]] = field(default_factory=list)
    decided_at: list[float] = field(default_factory=list)

    def decide(self, request: CodexRequest) -> Decision:
        self.requests.append(request)
        self.decided_at.append(time.monotonic())
        return self.verdict(request)

    def record(self, kind: str, data: dict[str, Any]) -> None:
        self.events.append((time.monotonic(), kind, data))

    def kinds(self, kind: str) -> list[dict[str, Any]]:
        return [data for _, k, data in self.events if k == kind]


@pytest.fixture
def codex() -> str:
    return str(real_cli("codex"))


@pytest.fixture
def server() -> Any:
    with ScriptedResponsesServer() as scripted:
        yield scripted


def always(verdict: str) -> Callable[[CodexRequest], Decision]:
    return lambda request: Decision(verdict, f"the test says {verdict}")  # type: ignore[arg-type]


def within_worktree(worktree: Path) -> Callable[[CodexRequest], Decision]:
    """The sandbox rule of the engine's policy: a change is allowed when every path it names
    resolves (symlinks followed) inside the worktree."""
    root = os.path.realpath(worktree)

    def verdict(request: CodexRequest) -> Decision:
        for path in request.paths:
            real = os.path.realpath(os.path.join(root, path))
            if os.path.commonpath([root, real]) != root:
                return Decision("deny", f"write_file outside the worktree: {path}")
        return Decision("allow", "every path is inside the worktree")

    return verdict


def session(
    codex: str,
    run: Run,
    *,
    sandbox: Sandbox = "workspace-write",
    timeout: float = 60,
    should_stop: Callable[[], bool] = lambda: False,
    over_budget: Callable[[int, int], str | None] = lambda i, o: None,
    outer: bool = True,
    layout: OsSandbox | None = None,
) -> CodexOutcome:
    """A session in the engine's sandbox (read-only worktree for `read-only`), unless `outer`
    is False: then codex's own sandbox, as with ADE_SANDBOX=off."""
    base = layout or (agent_sandbox(Settings(), run.worktree, "the test session") if outer else None)
    outer_layout = replace(base, writable=sandbox == "workspace-write") if base else None
    return run_codex_session(
        binary=codex,
        worktree=run.worktree,
        codex_home=run.codex_home,
        env={"PATH": os.environ["PATH"]},
        model=MODEL,
        prompt="Do the task.",
        base_url=f"{run.server.url}/v1",
        api_key=KEY,
        sandbox=sandbox,
        decide=run.decide,
        record=run.record,
        should_stop=should_stop,
        deadline=time.monotonic() + timeout,
        over_budget=over_budget,
        kill_grace=2.0,
        outer=outer_layout,
    )


def new_run(
    tmp_path: Path, server: ScriptedResponsesServer, verdict: Callable[[CodexRequest], Decision]
) -> Run:
    worktree, codex_home = tmp_path / "worktree", tmp_path / "codex-home"
    worktree.mkdir()
    codex_home.mkdir()
    return Run(worktree, codex_home, server, verdict)


def session_pids(codex_home: Path) -> set[int]:
    """The live processes started with this session's CODEX_HOME, and all their descendants."""
    marker = f"CODEX_HOME={codex_home}".encode()
    found: set[int] = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker in (entry / "environ").read_bytes().split(b"\0"):
                    found.add(int(entry.name))
            except OSError:
                continue
    todo = list(found)
    while todo:
        for child in child_pids(todo.pop()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return {pid for pid in found if pid_alive(pid)}


def command_line(pid: int) -> list[bytes]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:-1]
    except OSError:
        return []


def test_the_key_reaches_the_server_with_no_openai_key_in_the_parent(
    codex: str, server: ScriptedResponsesServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given: no OpenAI or Codex key anywhere in the worker's environment
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("CODEX_API_KEY", raising=False)
    server.script(Turn.text("all done"))
    run = new_run(tmp_path, server, always("deny"))

    # When
    outcome = session(codex, run)

    # Then: codex logged in with the engine's key, to the engine's base URL only
    assert outcome.status == "completed", outcome
    assert outcome.final_text == "all done"
    assert [r.path for r in server.requests] == ["/v1/responses"]
    assert server.requests[0].headers["authorization"] == f"Bearer {KEY}"
    assert outcome.input_tokens == 10 and outcome.output_tokens == 5
    assert run.kinds("agent.message") == [{"text": "all done"}]
    assert KEY_VARIABLE not in os.environ


def test_a_denied_command_never_runs_and_the_model_is_told(
    codex: str, server: ScriptedResponsesServer, tmp_path: Path
) -> None:
    # Given: a command that would leave a marker, and a "safe" read codex would run unasked
    server.script(
        Turn.command("touch denied-marker", call_id="call_touch"),
        Turn.command("cat /etc/passwd", call_id="call_cat"),
        Turn.text("gave up"),
    )
    run = new_run(tmp_path, server, always("deny"))

    # When
    outcome = session(codex, run)

    # Then: both were asked, neither ran, and the model got the refusals back
    assert outcome.status == "completed", outcome
    assert [r.command for r in run.requests] == [
        "/bin/bash -lc 'touch denied-marker'",
        "/bin/bash -lc 'cat /etc/passwd'",
    ]
    assert not (run.worktree / "denied-marker").exists()
    outputs = server.tool_outputs()
    assert "rejected" in outputs["call_touch"]
    assert "rejected" in outputs["call_cat"] and "root:" not in outputs["call_cat"]
    decisions = run.kinds("agent.tool_decision")
    assert [(d["id"], d["verdict"]) for d in decisions] == [
        ("call_touch", "deny"),
        ("call_cat", "deny"),
    ]


def test_an_allowed_command_runs_without_the_provider_key(
    codex: str, server: ScriptedResponsesServer, tmp_path: Path
) -> None:
    server.script(
        Turn.command("touch allowed-marker && env > env.txt", call_id="call_ok"),
        Turn.text("done"),
    )
    run = new_run(tmp_path, server, always("allow"))

    outcome = session(codex, run)

    assert outcome.status == "completed", outcome
    assert (run.worktree / "allowed-marker").exists()
    env_text = (run.worktree / "env.txt").read_text()
    assert KEY not in env_text and KEY_VARIABLE not in env_text
    assert "Process exited with code 0" in server.tool_outputs()["call_ok"]
    results = run.kinds("agent.tool_result")
    assert results and results[0]["id"] == "call_ok" and results[0]["exit_code"] == 0


def test_a_file_change_outside_the_worktree_never_reaches_the_host(
    codex: str, server: ScriptedResponsesServer, tmp_path: Path
) -> None:
    # Given: patches that add a file by absolute path and through `..`. Inside the engine's
    # sandbox codex applies them unasked (it has no sandbox of its own there), into the
    # sandbox's private /tmp: nothing of them reaches the host.
    outside = tmp_path / "outside-absolute.txt"
    server.script(
        Turn.patch(add_file_patch(str(outside), "escaped"), call_id="call_abs"),
        Turn.patch(add_file_patch("../outside-dotdot.txt", "escaped"), call_id="call_up"),
        Turn.text("done"),
    )
    run = new_run(tmp_path, server, within_worktree(tmp_path / "worktree"))

    outcome = session(codex, run)

    assert outcome.status == "completed", outcome
    assert not outside.exists()
    assert not (tmp_path / "outside-dotdot.txt").exists()


def test_an_in_worktree_change_is_applied_unasked_under_workspace_write(
    codex: str, server: ScriptedResponsesServer, tmp_path: Path
) -> None:
    # codex 0.169 does not ask for a patch inside its writable roots: this test pins that
    # limit (the module docstring reports it), and read-only shows the asking alternative.
    server.script(Turn.patch(add_file_patch("inside.txt", "hello"), call_id="c"), Turn.text("ok"))
    run = new_run(tmp_path, server, always("deny"))

    outcome = session(codex, run, sandbox="workspace-write")

    assert outcome.status == "completed", outcome
    assert (run.worktree / "inside.txt").read_text() == "hello\n"
    assert run.requests == []


def test_under_read_only_nothing_is_written_and_every_command_asks(
    codex: str, server: ScriptedResponsesServer, tmp_path: Path
) -> None:
    server.script(
        Turn.patch(add_file_patch("inside.txt", "hello"), call_id="call_in"),
        Turn.command("touch sandboxed-marker", call_id="call_touch"),
        Turn.text("ok"),
    )
    run = new_run(tmp_path, server, always("allow"))

    outcome = session(codex, run, sandbox="read-only")

    assert outcome.status == "completed", outcome
    # The engine's sandbox shows the worktree read-only: the patch fails without asking,
    # the command asks, and even approved it writes nothing.
    assert [r.kind for r in run.requests] == ["command"]
    assert not (run.worktree / "inside.txt").exists()
    assert not (run.worktree / "sandboxed-marker").exists()
    assert "Read-only file system" in server.tool_outputs()["call_touch"]

def test_large_usage_stops_the_session_as_over_budget(
    codex: str, server: ScriptedResponsesServer, tmp_path: Path
) -> None:
    # Given: the first response reports a million input tokens; the second asks for a command
    server.script(
        Turn.text("thinking out loud", usage=Usage(input_tokens=1_000_000)),
        Turn.command("touch over-budget-marker"),
        Turn.text("never reached"),
    )
    run = new_run(tmp_path, server, always("allow"))
    seen: set[int] = set()

    def over(input_tokens: int, output_tokens: int) -> str | None:
        seen.update(session_pids(run.codex_home))
        return f"{input_tokens} input tokens > 1000" if input_tokens > 1000 else None

    outcome = session(codex, run, over_budget=over)

    # Then: stopped at the first usage report, before anything else ran
    assert outcome.status == "budget_exceeded", outcome
    assert outcome.error == "1000000 input tokens > 1000"
    assert outcome.input_tokens == 1_000_000
    assert not (run.worktree / "over-budget-marker").exists()
    assert run.requests == []
    assert seen and not any(pid_alive(pid) for pid in seen)
    assert session_pids(run.codex_home) == set()


def test_a_call_in_the_response_that_crosses_the_budget_is_still_asked_for(
    codex: str, server: ScriptedResponsesServer, tmp_path: Path
) -> None:
    # codex asks for a call's approval as soon as the call is streamed, before the response's
    # usage arrives: this pins that limit (the module docstring reports it).
    server.script(
        Turn.command("touch first-marker", usage=Usage(input_tokens=1_000_000)),
        Turn.command("touch second-marker"),
        Turn.text("never reached"),
    )
    run = new_run(tmp_path, server, always("allow"))

    outcome = session(codex, run, over_budget=lambda i, o: "over" if i > 1000 else None)

    assert outcome.status == "budget_exceeded", outcome
    assert [r.command for r in run.requests] == ["/bin/bash -lc 'touch first-marker'"]
    assert not (run.worktree / "second-marker").exists()
    assert session_pids(run.codex_home) == set()


@pytest.mark.parametrize("how", ["should_stop", "deadline"])
def test_stop_and_deadline_kill_codex_and_the_commands_it_runs(
    codex: str, server: ScriptedResponsesServer, tmp_path: Path, how: str
) -> None:
    # Given: codex runs a long command, then the model "thinks" for a minute
    server.script(
        Turn.command("touch started; exec sleep 300", call_id="call_sleep"),
        Turn.text("late", delay=60),
    )
    run = new_run(tmp_path, server, always("allow"))
    seen: set[int] = set()
    sleeping: set[int] = set()

    def stop() -> bool:
        pids = session_pids(run.codex_home)
        seen.update(pids)
        sleeping.update(pid for pid in pids if command_line(pid)[:1] == [b"sleep"])
        return how == "should_stop" and bool(sleeping)

    # When
    started = time.monotonic()
    outcome = session(codex, run, should_stop=stop, timeout=60 if how == "should_stop" else 8)

    # Then: the session ended as asked, and nothing of it is left
    assert outcome.status == ("failed" if how == "should_stop" else "timed_out"), outcome
    assert time.monotonic() - started < 30
    assert (run.worktree / "started").exists()
    if how == "should_stop":
        assert sleeping  # the command ran (in codex's sandbox, a pid namespace of its own)
    assert not any(pid_alive(pid) for pid in seen), [p for p in seen if pid_alive(p)]
    assert session_pids(run.codex_home) == set()


def test_approval_round_trip(codex: str, server: ScriptedResponsesServer, tmp_path: Path) -> None:
    """20 approvals in a row: each is answered and its command runs; prints the timings."""
    count = 20
    server.script(
        *(Turn.command(f"echo {i} >> rounds.txt", call_id=f"call_{i}") for i in range(count)),
        Turn.text("done"),
    )
    run = new_run(tmp_path, server, always("allow"))

    outcome = session(codex, run)

    assert outcome.status == "completed", outcome
    assert (run.worktree / "rounds.txt").read_text().split() == [str(i) for i in range(count)]
    finished = {d["id"]: t for t, k, d in run.events if k == "agent.tool_result"}
    answered = dict(zip((r.id for r in run.requests), run.decided_at, strict=True))
    to_result = sorted(finished[i] - answered[i] for i in answered)
    cycle = sorted(b - a for a, b in zip(run.decided_at, run.decided_at[1:], strict=False))

    def p(values: list[float], q: float) -> float:
        return values[min(len(values) - 1, round(q * (len(values) - 1)))] * 1000

    print(
        f"\ncodex approvals: answer->command done p50 {p(to_result, 0.5):.1f} ms "
        f"p99 {p(to_result, 0.99):.1f} ms; approval->next approval p50 {p(cycle, 0.5):.1f} ms "
        f"p99 {p(cycle, 0.99):.1f} ms (median {statistics.median(cycle) * 1000:.1f} ms)"
    )


def test_project_settings_in_the_worktree_change_nothing(
    codex: str, server: ScriptedResponsesServer, tmp_path: Path
) -> None:
    # Given: a worktree whose .codex/ turns approvals off, opens the sandbox and allows `touch`,
    # and whose AGENTS.md carries instructions
    run = new_run(tmp_path, server, always("deny"))
    project = run.worktree / ".codex"
    (project / "rules").mkdir(parents=True)
    (project / "config.toml").write_text(
        'approval_policy = "never"\nsandbox_mode = "danger-full-access"\n'
    )
    (project / "rules" / "open.rules").write_text(
        'prefix_rule(pattern=["touch"], decision="allow")\n'
    )
    (run.worktree / "AGENTS.md").write_text("PROJECT-INSTRUCTIONS-MARKER\n")
    server.script(Turn.command("touch project-marker", call_id="call_p"), Turn.text("done"))

    outcome = session(codex, run)

    # Then: the command was still asked (and denied), and AGENTS.md never reached the model
    assert outcome.status == "completed", outcome
    assert [r.command for r in run.requests] == ["/bin/bash -lc 'touch project-marker'"]
    assert not (run.worktree / "project-marker").exists()
    bodies = [json.dumps(r.json) for r in server.model_requests()]
    assert not any("PROJECT-INSTRUCTIONS-MARKER" in body for body in bodies)


def test_sourcing_a_script_the_model_wrote_unasked_is_still_asked(
    codex: str, server: ScriptedResponsesServer, tmp_path: Path
) -> None:
    # Given: under workspace-write a patch in the worktree goes through unasked, so the model
    # can write a script; running it by any name or through the shell's `.` / `source` asks.
    server.script(
        Turn.patch(add_file_patch("evil.sh", "touch sourced-marker"), call_id="call_write"),
        Turn.command(". ./evil.sh", call_id="call_dot"),
        Turn.command("source evil.sh", call_id="call_source"),
        Turn.text("done"),
    )
    run = new_run(tmp_path, server, always("deny"))

    outcome = session(codex, run)

    assert outcome.status == "completed", outcome
    assert (run.worktree / "evil.sh").exists()
    assert [r.id for r in run.requests] == ["call_dot", "call_source"]
    assert not (run.worktree / "sourced-marker").exists()


def test_a_program_run_through_the_dynamic_loader_runs_unasked_but_escapes_nothing(
    codex: str, server: ScriptedResponsesServer, tmp_path: Path
) -> None:
    # The limit of execpolicy rules (the module docstring reports it): rules match programs by
    # basename, so `ld-linux-x86-64.so.2 /bin/sh ...` runs without asking, in plan mode and
    # with every call denied. The engine's sandbox is what bounds it: the escape corpus.
    data = tmp_path / "engine-data"
    data.mkdir()
    (data / "api-token").write_text("codex-canary-token-42\n")
    target = Target.of_this_process(data / "api-token", (int(server.url.rsplit(":", 1)[1]),))
    command = f"/lib64/ld-linux-x86-64.so.2 /bin/sh -c {shlex.quote(escape_script(target))}"
    server.script(Turn.command(command, call_id="call_loader"), Turn.text("done"))
    run = new_run(tmp_path, server, always("deny"))

    base = agent_sandbox(Settings(data_dir=data), run.worktree, "the test session")
    outcome = session(codex, run, sandbox="read-only", layout=base)

    assert outcome.status == "completed", outcome
    assert run.requests == []  # it ran unasked ...
    check_escapes(server.tool_outputs()["call_loader"], target)  # ... and reached nothing


def test_an_allowed_command_cannot_write_outside_the_worktree(
    codex: str, server: ScriptedResponsesServer, tmp_path: Path
) -> None:
    outside = tmp_path / "outside-by-command"
    server.script(Turn.command(f"touch {outside}", call_id="call_out"), Turn.text("done"))
    run = new_run(tmp_path, server, always("allow"))

    outcome = session(codex, run, sandbox="workspace-write")

    assert outcome.status == "completed", outcome
    assert len(run.requests) == 1
    assert not outside.exists()  # it wrote into the sandbox's private /tmp
