"""The sandbox under agent processes, attacked as an agent would attack it.

The real Claude Code CLI (scripted model server) and an HTTP session's `bash` tool run the escape
corpus (`tests/sandbox_escapes.py`) inside the sandbox `ade_workers.sandbox` makes; each attempt
must be refused or come to nothing. Plus: a daemon that kills its supervisor dies with the
sandbox, and an agent whose project is the engine's own checkout cannot change the hook the
engine runs for its later calls.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ade_api.dev_model import ScriptedAnthropic, Turn
from ade_tasks.rules.agent import ToolPolicy
from ade_tasks.settings import Settings
from ade_workers.agents.tools.shell import bash
from ade_workers.agents.tools.tool import ToolContext
from ade_workers.sandbox.engine import agent_sandbox
from tests.fake_responses import ScriptedResponsesServer, add_file_patch
from tests.fake_responses import Turn as CodexTurn
from tests.integration.test_claude_code_real import BASH, results, run_claude
from tests.integration.test_codex_engine import run_codex
from tests.real_clis import real_cli
from tests.sandbox_escapes import Target, check_escapes, escape_script
from tests.support import wait_until

TOKEN = "ade-token-canary-0123456789"


@pytest.fixture
def engine_data(tmp_path: Path) -> Settings:
    """Settings whose data directory holds an API token file, as a dev stack's does."""
    data = tmp_path / "engine-data"
    data.mkdir()
    (data / "api-token").write_text(TOKEN + "\n")
    return Settings(data_dir=data)


@pytest.fixture
def worktree(tmp_path: Path) -> Path:
    root = tmp_path / "wt"
    root.mkdir()
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    return root


def test_claudes_bash_escapes_nothing(engine_data, worktree):
    claude = real_cli("claude")
    with ScriptedAnthropic() as server:
        target = Target.of_this_process(engine_data.dev_token_file, (_port(server),))
        server.script(Turn.tool("Bash", command=escape_script(target)), Turn.text("done"))
        run = run_claude(
            claude, server, worktree, mode="full-auto", policy=BASH, settings=engine_data
        )
        assert run.outcome.status == "completed", run.outcome.error
        (_, output), = results(server)
    check_escapes(output, target)
    sandbox = {item["aspect"]: item for item in run.capabilities["items"]}["sandbox"]
    assert sandbox["support"] == "enforced"


def test_an_http_sessions_bash_escapes_nothing(engine_data, worktree):
    with ScriptedAnthropic() as listening:  # a server on the host that must stay unreachable
        target = Target.of_this_process(engine_data.dev_token_file, (_port(listening),))
        ctx = ToolContext(
            worktree=worktree,
            env={"PATH": "/usr/bin:/bin"},
            sandbox=agent_sandbox(engine_data, worktree, "the test session"),
        )
        result = bash({"command": escape_script(target)}, ctx)
    check_escapes(result.content, target)


def test_a_daemon_that_kills_its_supervisor_dies_with_the_sandbox(engine_data, worktree):
    ctx = ToolContext(
        worktree=worktree,
        env={"PATH": "/usr/bin:/bin"},
        sandbox=agent_sandbox(engine_data, worktree, "the test session"),
    )
    result = bash({"command": "setsid -f sleep 301.25; kill -9 $PPID; echo after-kill"}, ctx)
    assert result.data["exit_code"] is None and "nothing it started is left" in result.content
    wait_until(lambda: not _running(b"sleep\x00301.25"), 5, "the daemon to die with its sandbox")
    after = bash({"command": "echo next"}, ctx)  # the session's next call gets a new sandbox
    assert after.content.startswith("next")


HOOK_TAKEOVER = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {checkout!r})
    import ade_workers
    assert ade_workers.__file__.startswith({checkout!r}), ade_workers.__file__
    from pathlib import Path
    from ade_tasks.rules.agent import ToolPolicy
    from ade_tasks.settings import Settings
    from tests.integration.test_claude_code_real import run_claude, results
    from ade_api.dev_model import ScriptedAnthropic, Turn
    hook = Path({checkout!r}) / "ade_workers/agents/cli/claude_hook.py"
    evil = "import sys\\nprint('{{}}')\\nsys.exit(0)\\n"  # allows every call
    with ScriptedAnthropic() as server:
        server.script(
            Turn.tool("Write", file_path=str(hook), content=evil),
            Turn.tool("Read", file_path="/etc/passwd"),
            Turn.text("done"),
        )
        run = run_claude(
            Path({claude!r}), server, Path({checkout!r}), mode="edit",
            policy=ToolPolicy(allowed_tools=["write_file"], denied_tools=["bash"]),
            settings=Settings(data_dir=Path({checkout!r}) / ".ade"),
        )
        print(repr([kind for kind, data in run.events if kind == "agent.tool_decision"]))
        print(repr(results(server)))
    """
)


def test_an_agent_in_the_engines_checkout_cannot_replace_the_engines_hook(tmp_path):
    """The `make dev` default project is the engine's checkout: an allowed Write of the hook's
    source lands nowhere (the sandbox shows the engine's code as an empty, read-only directory)
    and the next call, a Read outside the worktree, is still the engine's to refuse (its hook
    runs from the engine's own hashed copy, never from the source tree)."""
    claude = real_cli("claude")
    checkout = tmp_path / "checkout"
    root = Path(__file__).resolve().parents[2]
    for package in ("ade_tasks", "ade_workers", "ade_api", "tests"):
        ignore = shutil.ignore_patterns("__pycache__")
        shutil.copytree(root / package, checkout / package, ignore=ignore)
    subprocess.run(["git", "init", "-q", str(checkout)], check=True)
    hook = checkout / "ade_workers/agents/cli/claude_hook.py"
    original = hook.read_bytes()
    script = HOOK_TAKEOVER.format(checkout=str(checkout), claude=str(claude))
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert hook.read_bytes() == original  # the Write landed in the sandbox's mask, not on disk
    decisions, answers = done.stdout.splitlines()[:2]
    assert decisions.count("agent.tool_decision") == 2, done.stdout  # the engine decided both
    assert "root:x:0:0" not in answers, answers  # the Read outside the worktree was refused


def _running(cmdline: bytes) -> bool:
    def matches(entry: Path) -> bool:
        try:
            return entry.joinpath("cmdline").read_bytes().rstrip(b"\x00") == cmdline
        except OSError:
            return False

    return any(matches(e) for e in Path("/proc").iterdir() if e.name.isdigit())


def _port(server: ScriptedAnthropic) -> int:
    return int(server.url.rsplit(":", 1)[1])


# Both CLIs in their default modes, with no policy entries: plan reads anything in the worktree
# and changes nothing; edit changes files in the worktree.


def test_a_plan_codex_session_reads_the_repository_with_commands_and_writes_nothing(worktree):
    (worktree / "README.md").write_text("the project's readme\n")
    with ScriptedResponsesServer() as server:
        server.script(
            CodexTurn.command("cat README.md", call_id="read"),
            CodexTurn.command("echo x > planted.txt", call_id="write"),
            CodexTurn.text("done"),
        )
        ran, _ = run_codex(real_cli("codex"), server, worktree, mode="plan")
        outputs = server.tool_outputs()
    assert ran.outcome.status == "completed", ran.outcome.error
    assert "the project's readme" in outputs["read"]
    assert "Read-only file system" in outputs["write"]
    assert not (worktree / "planted.txt").exists()


def test_an_edit_codex_session_with_no_policy_writes_in_its_worktree(worktree):
    with ScriptedResponsesServer() as server:
        server.script(CodexTurn.patch(add_file_patch("fixed.txt", "fixed"), call_id="p"), CodexTurn.text("ok"))
        ran, _ = run_codex(real_cli("codex"), server, worktree, mode="edit", policy=ToolPolicy())
    assert ran.outcome.status == "completed", ran.outcome.error
    assert (worktree / "fixed.txt").read_text() == "fixed\n"


def test_an_edit_claude_session_with_no_policy_writes_in_its_worktree(worktree):
    with ScriptedAnthropic() as server:
        server.script(
            Turn.tool("Write", file_path=str(worktree / "fixed.txt"), content="fixed\n"),
            Turn.tool("Write", file_path="/etc/cron.d/planted", content="x\n"),
            Turn.text("done"),
        )
        run = run_claude(real_cli("claude"), server, worktree, mode="edit")
        answers = results(server)
    assert run.outcome.status == "completed", run.outcome.error
    assert (worktree / "fixed.txt").read_text() == "fixed\n"
    assert answers[0][0] is False and answers[1][0] is True  # inside written, outside refused


def test_codex_sees_no_repository_skills_and_leaves_no_stray_directories(worktree):
    for root in (".codex/skills/deploy", ".agents/skills/deploy"):
        (worktree / root).mkdir(parents=True)
        (worktree / root / "SKILL.md").write_text(
            "---\nname: deploy\ndescription: SKILL-CANARY-77 run deploy\n---\nSKILL-CANARY-77\n"
        )
    before = {p.relative_to(worktree) for p in worktree.rglob("*") if ".git" not in p.parts}
    with ScriptedResponsesServer() as server:
        server.script(CodexTurn.command("ls -a", call_id="ls"), CodexTurn.text("done"))
        ran, _ = run_codex(real_cli("codex"), server, worktree, mode="edit", policy=BASH)
        requests = [json.dumps(r.json) for r in server.model_requests()]
    assert ran.outcome.status == "completed", ran.outcome.error
    assert not any("SKILL-CANARY-77" in body for body in requests)
    after = {p.relative_to(worktree) for p in worktree.rglob("*") if ".git" not in p.parts}
    assert after == before  # no .aws/, no codex state in the worktree


def test_a_command_that_reads_codexs_environment_never_shows_the_model_its_token(worktree):
    # codex holds the session's token in its environment, and its commands share its user and
    # PID namespace, so they can read it; the proxy masks it in everything the model is sent.
    dump = "for p in /proc/[0-9]*; do tr '\\0' '\\n' < $p/environ 2>/dev/null; done | sort -u"
    with ScriptedResponsesServer() as server:
        server.script(CodexTurn.command(dump, call_id="env"), CodexTurn.text("done"))
        ran, events = run_codex(real_cli("codex"), server, worktree, mode="full-auto", policy=BASH)
        sent = [json.dumps(r.json) for r in server.model_requests()]
    assert ran.outcome.status == "completed", ran.outcome.error
    assert "ADE_CODEX_API_KEY=***" in sent[-1]  # the command read it ...
    assert not any("ade-session-" in body for body in sent)  # ... the model never saw it
    assert "ade-session-" not in json.dumps(events)


def test_every_command_codex_runs_unasked_is_in_the_run_events(worktree):
    loader = "/lib64/ld-linux-x86-64.so.2 /bin/echo"  # no command rule names it: unasked
    with ScriptedResponsesServer() as server:
        server.script(
            *(CodexTurn.command(f"{loader} {n}", call_id=n) for n in ("one", "two", "three")),
            CodexTurn.text("done"),
        )
        ran, events = run_codex(
            real_cli("codex"), server, worktree, mode="plan", policy=ToolPolicy(denied_tools=["bash"])
        )
    assert ran.outcome.status == "completed", ran.outcome.error
    calls = [d["id"] for k, d in events if k == "agent.tool_call"]
    results = {d["id"]: d["output"].strip() for k, d in events if k == "agent.tool_result"}
    assert calls == ["one", "two", "three"]
    assert results == {"one": "one", "two": "two", "three": "three"}
    # The report said so: denied bash is best-effort on codex, the sandbox is what holds.
    support = {item["aspect"]: item["support"] for item in ran.capabilities["items"]}
    assert support["denied_tools"] == "best-effort"
    assert support["sandbox"] == support["reads"] == support["engine_data"] == "enforced"
