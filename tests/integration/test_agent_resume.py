"""A worker SIGKILLed mid-session: the recovery sweep queues the session again and the next
worker continues it from its recorded events, without repeating the tool call it had finished.

Real parts: PostgreSQL, Redis, `celery worker` processes, `ade-tasks beat` driving the sweep,
and a scripted OpenAI-compatible model server on 127.0.0.1.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from ade_api.dev_model import ScriptedAnthropic, Turn
from ade_tasks.db import run_events as run_events_db
from ade_tasks.db import run_recovery as run_recovery_db
from ade_tasks.db import run_steps as run_steps_db
from ade_tasks.db.schema import RunRow
from ade_tasks.runs.dispatch import dispatch
from ade_tasks.runs.trigger_events import TriggerEvent
from tests.conftest import write_rule
from tests.fake_llm import Reply, ScriptedModelServer
from tests.fake_responses import ScriptedResponsesServer
from tests.fake_responses import Turn as ResponsesTurn
from tests.integration.agent_run_support import text, tool_calls
from tests.integration.conftest import Cluster
from tests.integration.test_run_path import finished
from tests.real_clis import real_cli
from tests.support import wait_until

HANG = 30.0  # the interrupted model call never answers before the worker is killed


@pytest.fixture
def llm() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer() as server:
        yield server


def add_agent_rule(cluster: Cluster) -> None:
    rules_dir = cluster.tmp / "rules"
    write_rule(
        rules_dir,
        "agent.yaml",
        """
        id: agent
        triggers: [{type: manual}]
        execution:
          kind: agent-session
          provider: openai
          model: gpt-4o-mini
          permission_mode: full-auto
          tool_palette: [git]
          policy: {allowed_tools: [bash]}
          prompt: "Append one line to side-effect.txt, then say done."
        """,
    )
    cluster.sync_rules(rules_dir)


def events(cluster: Cluster, run_id: str) -> list[tuple[str, dict[str, object]]]:
    with cluster.session_factory() as session:
        return run_events_db.events_of(session, run_id)


def test_a_session_whose_worker_is_killed_resumes_without_repeating_its_tool_call(
    cluster: Cluster, project: Path, llm: ScriptedModelServer
) -> None:
    add_agent_rule(cluster)
    llm.script(
        tool_calls(("call_1", "bash", {"command": "echo once >> side-effect.txt"})),
        Reply(body=text("never seen").body, delay=HANG),  # the worker dies waiting for this
        text("done after the resume"),
    )
    providers = {"openai": {"base_url": llm.url, "api_key": "sk-test-key"}}
    env = {"ADE_PROVIDERS": json.dumps(providers)}
    victim = cluster.worker(queues="ade.agent", env=env)
    cluster.worker(queues="ade.control")  # the recovery sweep runs here ...
    cluster.beat()  # ... sent every second by `ade-tasks beat`
    run_id = dispatch(
        cluster.session_factory, cluster.sender(), "agent", TriggerEvent.manual()
    ).run.id

    def tool_ran_and_model_asked_again() -> bool:
        kinds = [kind for kind, _ in events(cluster, run_id)]
        return "agent.tool_result" in kinds and len(llm.requests) == 2

    wait_until(tool_ran_and_model_asked_again, 30, "the tool call, then the next model call")
    victim.signal(signal.SIGKILL)
    cluster.worker(queues="ade.agent", env=env)

    row = finished(cluster, run_id, timeout=60)

    assert row.status == "succeeded", row.error
    assert row.attempt == 2
    assert (project / "side-effect.txt").read_text() == "once\n"
    recorded = events(cluster, run_id)
    kinds = [kind for kind, _ in recorded]
    assert [d["tool_call_id"] for k, d in recorded if k == "agent.tool_result"] == ["call_1"]
    assert kinds.count("agent.model_turn") == 2  # turn 1, then the reply asked again
    assert kinds.count(run_recovery_db.RESUMED_EVENT) == 1 and "run.worker_lost" not in kinds
    # The hung turn was asked again with the same conversation, ending in the recorded result.
    assert len(llm.requests) == 3
    hung, again = llm.requests[1].json["messages"], llm.requests[2].json["messages"]
    assert again == hung
    assert again[-1]["role"] == "tool" and again[-1]["tool_call_id"] == "call_1"
    with cluster.session_factory() as session:
        (step,) = run_steps_db.list_steps(session, run_id)
    assert (step.step_id, step.status) == ("session", "succeeded")


def test_a_command_in_flight_when_its_worker_died_is_reported_interrupted_not_run_again(
    cluster: Cluster, project: Path, llm: ScriptedModelServer
) -> None:
    # Given a session whose bash call is still running when its worker is SIGKILLed
    add_agent_rule(cluster)
    command = "echo once >> side-effect.txt; sleep 20"
    llm.script(
        tool_calls(("call_1", "bash", {"command": command})),
        text("noted: the command's outcome is unknown"),
    )
    providers = {"openai": {"base_url": llm.url, "api_key": "sk-test-key"}}
    env = {"ADE_PROVIDERS": json.dumps(providers)}
    victim = cluster.worker(queues="ade.agent", env=env)
    cluster.worker(queues="ade.control")
    cluster.beat()
    run_id = dispatch(
        cluster.session_factory, cluster.sender(), "agent", TriggerEvent.manual()
    ).run.id
    side_effect = project / "side-effect.txt"
    wait_until(side_effect.exists, 30, "the command to start")

    # When the worker dies mid-command and another one resumes the session
    victim.signal(signal.SIGKILL)
    cluster.worker(queues="ade.agent", env=env)
    row = finished(cluster, run_id, timeout=60)

    # Then the command ran once, and the model was told its outcome is unknown
    assert row.status == "succeeded", row.error
    assert side_effect.read_text() == "once\n"
    (result,) = [d for k, d in events(cluster, run_id) if k == "agent.tool_result"]
    assert (result["tool_call_id"], result["is_error"]) == ("call_1", True)
    assert "interrupted" in result["content"] and "unknown" in result["content"]
    sent = llm.requests[-1].json["messages"][-1]
    assert sent["role"] == "tool" and sent["tool_call_id"] == "call_1"
    assert "interrupted" in sent["content"]


def kill_once_journaled(
    cluster: Cluster, cli: str, provider: dict[str, str], model_asked_again: Callable[[], bool]
) -> tuple[str, RunRow]:
    """Run a full-auto session of `cli` that is to count once; SIGKILL its worker once the
    finished call is journaled and the model is asked again (that turn hangs), let another
    worker resume it, and return the run's id and its finished row."""
    write_rule(cluster.tmp / "rules", "counter.yaml", f"""
        id: counter
        triggers: [{{type: manual}}]
        execution:
          kind: agent-session
          provider: {cli}
          model: model-test
          permission_mode: full-auto
          tool_palette: [repo, git]
          policy: {{allowed_tools: [bash, write_file, edit_file]}}
          prompt: "Count once, then say done."
        """)  # fmt: skip
    cluster.sync_rules(cluster.tmp / "rules")
    env = {"ADE_PROVIDERS": json.dumps({cli: provider})}
    victim = cluster.worker(queues="ade.agent", env=env)
    cluster.worker(queues="ade.control")
    cluster.beat()
    run_id = dispatch(
        cluster.session_factory, cluster.sender(), "counter", TriggerEvent.manual()
    ).run.id

    def finished_call_journaled_and_model_asked_again() -> bool:
        kinds = [kind for kind, _ in events(cluster, run_id)]
        return "agent.tool_completed" in kinds and model_asked_again()

    wait_until(finished_call_journaled_and_model_asked_again, 60, "the call, then a hung turn")
    victim.signal(signal.SIGKILL)
    cluster.worker(queues="ade.agent", env=env)
    return run_id, finished(cluster, run_id, timeout=90)


def counted_once_then_replayed(cluster: Cluster, run_id: str, row: RunRow, project: Path) -> None:
    """The resumed run succeeded, the count ran once, and the engine answered its repeat."""
    assert row.status == "succeeded", row.error
    assert row.attempt == 2
    assert (project / "counter.txt").read_text() == "once\n"
    decisions = [d for k, d in events(cluster, run_id) if k == "agent.tool_decision"]
    assert [d["verdict"] for d in decisions] == ["allow", "deny"]
    assert decisions[1]["reason"].startswith("not run again")


def test_a_resumed_claude_session_gets_a_finished_calls_result_instead_of_running_it_again(
    cluster: Cluster, project: Path
) -> None:
    # Given a real claude session whose Bash call finished, and whose next model call hangs
    # until its worker is SIGKILLed
    command = "echo once >> counter.txt"
    with ScriptedAnthropic() as server:
        server.script(
            Turn.tool("Bash", command=command),
            replace(Turn.text("never seen"), delay=HANG),
            Turn.tool("Bash", command=command),  # the fresh CLI of the resumed run asks again
            Turn.text("done after the resume"),
        )
        # The finished call is journaled while claude still runs (its PostToolUse hook).
        provider = {"binary": str(real_cli("claude")), "base_url": server.url, "api_key": "sk-k"}
        run_id, row = kill_once_journaled(
            cluster, "claude-code", provider, lambda: len(server.conversation) == 2
        )

    # Then the call ran once; its repeat got the recorded result from the engine's hook
    counted_once_then_replayed(cluster, run_id, row, project)
    assert "not run again" in json.dumps(server.conversation[-1].body)  # the model was told


def test_a_resumed_codex_session_declines_a_finished_call_and_is_told_its_result(
    cluster: Cluster, project: Path
) -> None:
    # Given a real codex session whose command finished (journaled from codex's completed
    # item), and whose next model call hangs until its worker is SIGKILLed
    command = "echo once >> counter.txt; echo counted-41"
    with ScriptedResponsesServer() as server:
        server.script(
            ResponsesTurn.command(command, call_id="first"),
            ResponsesTurn.text("never seen", delay=HANG),
            ResponsesTurn.command(command, call_id="again"),  # the resumed codex asks again
            ResponsesTurn.text("done after the resume"),
        )
        provider = {
            "binary": str(real_cli("codex")), "base_url": f"{server.url}/v1", "api_key": "sk-k",
        }  # fmt: skip
        run_id, row = kill_once_journaled(
            cluster, "codex", provider, lambda: len(server.model_requests()) == 2
        )
        resumed_prompt = json.dumps(server.model_requests()[2].json)
        declined = server.tool_outputs()["again"]

    # Then the command ran once; its repeat was declined, and the resumed prompt held its result
    counted_once_then_replayed(cluster, run_id, row, project)
    assert "will not run them again" in resumed_prompt and "result: counted-41" in resumed_prompt
    assert "rejected" in declined  # codex's approval protocol declines; it cannot carry a result
