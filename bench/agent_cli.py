"""Agent CLI benchmark: what the engine costs a Claude Code or Codex session, against the bare
CLI on the same scripted model server (127.0.0.1), in one run.

(a) Decision round trip per Claude Code tool call: Claude runs the engine's PreToolUse hook
    (`python -I -S claude_hook.py SOCKET`) before every call; the hook asks the worker's
    decision socket and the engine's policy judges. Measured as the wall time of the hook
    program, `--calls` times, against a baseline hook that answers "allow" without asking anyone
    (the same interpreter and flags): the difference is the engine's share.
(b) Per tool call inside a real session: a session of `--tools-per-session` Bash calls through the
    engine (hook, decision socket, model proxy) against the bare CLI with Bash pre-approved
    (`claude -p --allowedTools Bash`; `codex exec` with `approval_policy = "never"`), per call.
(c) Session overhead: a one-turn text session through the engine (`run_cli_session`: the model
    proxy, the private home, the decision socket, the capability reports) against the bare CLI
    pointed straight at the server, `--sessions` times each, medians.

Needs the pinned CLIs (`make test` installs them in .venv/agent-clis). From the repository root
(about a minute):

    .venv/bin/python bench/agent_cli.py [--calls 200] [--sessions 5] [--tools-per-session 10]
"""

from __future__ import annotations

import sys as _sys
from pathlib import Path as _Path

if __package__ in (None, ""):  # run as `python bench/agent_cli.py`: import from the repository
    _sys.path.insert(0, str(_Path(__file__).resolve().parent.parent))

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ade_api import dev_model as fake_anthropic
from ade_tasks.agents.policy import Policy, exposed_tools
from ade_tasks.agents.protected import ProtectedPaths
from ade_tasks.rules.agent import AgentSession, ToolPolicy
from ade_tasks.secrets import Masker
from ade_tasks.settings import ProviderSettings
from ade_workers.agents.cli import claude_hook
from ade_workers.agents.cli.claude_calls import CallJudge
from ade_workers.agents.cli.cli_session import run_cli_session
from ade_workers.agents.cli.decision_server import DecisionServer
from ade_workers.agents.cli.setup import CliSetup
from ade_workers.agents.http_session import NO_DECISIONS, SessionLimits
from ade_workers.sandbox.layout import Sandbox
from bench.common import BenchError, percentile
from tests import fake_responses

ROOT = Path(__file__).resolve().parent.parent
CLIS = ROOT / ".venv" / "agent-clis" / "node_modules" / ".bin"
KEY = "sk-bench-0123456789"
CODEX_MODEL = "gpt-5.5"
ALLOW_HOOK = (
    "import json,sys; json.load(sys.stdin); print(json.dumps({'hookSpecificOutput': "
    "{'hookEventName': 'PreToolUse', 'permissionDecision': 'allow'}}))"
)
BASH = ToolPolicy(allowed_tools=["bash"])


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


def timed(action: Callable[[], Any]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


# --- (a) the hook's round trip ----------------------------------------------------------------


def hook_round_trips(calls: int, worktree: Path) -> tuple[list[float], list[float]]:
    payload = json.dumps(
        {"tool_name": "Bash", "tool_input": {"command": "make test"}, "tool_use_id": "toolu_1"}
    )
    judge = CallJudge(
        policy=Policy.from_rule(BASH, "full-auto"),
        tainted=False,
        worktree=worktree,
        protected=ProtectedPaths.for_worktree(worktree),
        decisions=NO_DECISIONS,
        record=lambda *_: None,
        on_ask=lambda _: None,
    )
    engine: list[float] = []
    bare: list[float] = []
    with tempfile.TemporaryDirectory() as scratch, DecisionServer(Path(scratch) / "d.sock", judge):
        hook = [sys.executable, "-I", "-S", claude_hook.__file__, str(Path(scratch) / "d.sock")]
        allow = [sys.executable, "-I", "-S", "-c", ALLOW_HOOK]
        for _ in range(calls):  # interleaved, so drift hits both sides alike
            for argv, into in ((hook, engine), (allow, bare)):
                started = time.perf_counter()
                done = subprocess.run(
                    argv, input=payload, capture_output=True, text=True, check=False
                )
                into.append(time.perf_counter() - started)
                if done.returncode != 0 or "allow" not in done.stdout:
                    raise BenchError(f"the hook failed: {done.stdout} {done.stderr}")
    return engine, bare


# --- sessions through the engine -------------------------------------------------------------


def engine_session(
    provider: str,
    binary: Path,
    base_url: str,
    worktree: Path,
    bash: bool,
    sandbox: Sandbox | None = None,
) -> str:
    execution = AgentSession(
        provider=provider,  # type: ignore[arg-type]
        model=CODEX_MODEL if provider == "codex" else "claude-bench",
        prompt="do the task",
        permission_mode="full-auto",
        tool_palette=["repo", "git"],
        policy=BASH if bash else ToolPolicy(),
    )
    policy = Policy.from_rule(execution.policy, execution.permission_mode)
    setup = CliSetup(
        binary=str(binary),
        worktree=worktree,
        env={"PATH": os.environ["PATH"]},
        limits=SessionLimits(max_turns=50, max_tokens=None, deadline=time.monotonic() + 120),
        policy=policy,
        tools=exposed_tools(list(execution.tool_palette), execution.permission_mode, policy),
        tainted=False,
        decisions=NO_DECISIONS,
        protected=ProtectedPaths.for_worktree(worktree),
        provider=ProviderSettings(api_key=KEY, base_url=base_url),  # type: ignore[arg-type]
        masker=Masker.none(),
        record=lambda *_: None,
        sandbox=sandbox,
    )
    ran = run_cli_session(
        execution,
        setup,
        prompt=execution.prompt,
        system=None,
        deadline=setup.limits.deadline,
        should_stop=lambda: False,
        kill_grace=1.0,
    )
    if ran.outcome.status != "completed":
        raise BenchError(f"the engine's {provider} session failed: {ran.outcome.error}")
    return ran.outcome.summary


def bare_claude(binary: Path, base_url: str, worktree: Path, bash: bool) -> None:
    home = tempfile.mkdtemp(prefix="bench-claude-")
    env = {
        "PATH": os.environ["PATH"],
        "HOME": home,
        "CLAUDE_CONFIG_DIR": f"{home}/.claude",
        "ANTHROPIC_BASE_URL": base_url,
        "ANTHROPIC_API_KEY": KEY,
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_TELEMETRY": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }
    argv = [str(binary), "-p", "--output-format", "stream-json", "--verbose", "--model", "m"]
    argv += ["--allowedTools", "Bash", "--tools", "Bash"] if bash else ["--tools", ""]
    done = subprocess.run(
        [*argv, "--", "do the task"], cwd=worktree, env=env, stdin=subprocess.DEVNULL,
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    if done.returncode != 0 or '"subtype":"success"' not in done.stdout:
        raise BenchError(f"bare claude failed: {done.stdout[-500:]} {done.stderr[-500:]}")


def bare_codex(binary: Path, base_url: str, worktree: Path) -> None:
    home = Path(tempfile.mkdtemp(prefix="bench-codex-"))
    (home / "config.toml").write_text(
        f'model = "{CODEX_MODEL}"\nmodel_provider = "bench"\napproval_policy = "never"\n'
        'sandbox_mode = "workspace-write"\n[model_providers.bench]\nname = "bench"\n'
        f'base_url = "{base_url}"\nenv_key = "BENCH_KEY"\nwire_api = "responses"\n'
    )
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "CODEX_HOME": str(home), "BENCH_KEY": KEY}
    done = subprocess.run(
        [str(binary), "exec", "--json", "--skip-git-repo-check", "--", "do the task"],
        cwd=worktree, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
        timeout=120, check=False,
    )  # fmt: skip
    if done.returncode != 0 or "turn.completed" not in done.stdout:
        raise BenchError(f"bare codex failed: {done.stdout[-500:]} {done.stderr[-500:]}")


def claude_turns(tools: int) -> list[fake_anthropic.Turn]:
    calls = [fake_anthropic.Turn.tool("Bash", command=f"echo {i}") for i in range(tools)]
    return [*calls, fake_anthropic.Turn.text("done")]


def codex_turns(tools: int) -> list[fake_responses.Turn]:
    calls = [fake_responses.Turn.command(f"echo {i}") for i in range(tools)]
    return [*calls, fake_responses.Turn.text("done")]


def compare(
    label: str,
    sessions: int,
    script: Callable[[], None],
    engine: Callable[[], Any],
    bare: Callable[[], Any],
) -> tuple[float, float]:
    """Median wall time of `engine` and `bare` sessions, interleaved, each after `script()`."""
    engine_times: list[float] = []
    bare_times: list[float] = []
    for _ in range(sessions):
        script()
        engine_times.append(timed(engine))
        script()
        bare_times.append(timed(bare))
    e, b = statistics.median(engine_times), statistics.median(bare_times)
    print(f"  {label:<34} engine {ms(e):>10}  bare {ms(b):>10}  ratio {e / b:4.2f}x", flush=True)
    return e, b


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--sessions", type=int, default=5)
    parser.add_argument("--tools-per-session", type=int, default=10)
    args = parser.parse_args()
    claude, codex = CLIS / "claude", CLIS / "codex"
    for binary in (claude, codex):
        if not binary.exists():
            raise SystemExit(f"{binary} is missing: run `make test` (it installs the pinned CLIs)")
    with tempfile.TemporaryDirectory(prefix="bench-agent-") as scratch:
        worktree = Path(scratch) / "wt"
        worktree.mkdir()
        subprocess.run(["git", "init", "-q", str(worktree)], check=True)

        print(f"(a) Claude Code decision round trip, {args.calls} hook calls:", flush=True)
        engine, bare = hook_round_trips(args.calls, worktree)
        print(
            f"  engine hook p50 {ms(percentile(engine, 50))}, p99 {ms(percentile(engine, 99))}; "
            f"allow-only hook p50 {ms(percentile(bare, 50))}, p99 {ms(percentile(bare, 99))}; "
            f"the engine's share p50 {ms(percentile(engine, 50) - percentile(bare, 50))}",
            flush=True,
        )

        k = args.tools_per_session
        print(f"(b, c) sessions ({args.sessions} each, medians):", flush=True)
        with fake_anthropic.ScriptedAnthropic() as server:
            one_e, one_b = compare(
                "claude-code, one text turn", args.sessions,
                lambda: server.script(fake_anthropic.Turn.text("done")),
                lambda: engine_session("claude-code", claude, server.url, worktree, False),
                lambda: bare_claude(claude, server.url, worktree, False),
            )  # fmt: skip
            many_e, many_b = compare(
                f"claude-code, {k} Bash calls", args.sessions,
                lambda: server.script(*claude_turns(k)),
                lambda: engine_session("claude-code", claude, server.url, worktree, True),
                lambda: bare_claude(claude, server.url, worktree, True),
            )  # fmt: skip
            print(
                f"  claude-code per tool call: engine {ms((many_e - one_e) / k)}, "
                f"bare {ms((many_b - one_b) / k)}",
                flush=True,
            )
        with fake_responses.ScriptedResponsesServer() as responses:
            url = f"{responses.url}/v1"
            one_e, one_b = compare(
                "codex, one text turn", args.sessions,
                lambda: responses.script(fake_responses.Turn.text("done")),
                lambda: engine_session("codex", codex, url, worktree, False),
                lambda: bare_codex(codex, url, worktree),
            )  # fmt: skip
            many_e, many_b = compare(
                f"codex, {k} commands", args.sessions,
                lambda: responses.script(*codex_turns(k)),
                lambda: engine_session("codex", codex, url, worktree, True),
                lambda: bare_codex(codex, url, worktree),
            )  # fmt: skip
            print(
                f"  codex per command: engine {ms((many_e - one_e) / k)}, "
                f"bare {ms((many_b - one_b) / k)}",
                flush=True,
            )


if __name__ == "__main__":
    try:
        main()
    except BenchError as exc:
        raise SystemExit(f"bench failed: {exc}") from None
