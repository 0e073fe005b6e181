"""`concurrency.on_new: supersede` stopping work in progress: a command step in a real `celery
worker` (its process tree ends, the run is cancelled with the reason, the new run completes),
and an agent session on an HTTP provider (a scripted model server on 127.0.0.1; the session
ends without another model call, the turn it had is kept in the run's events)."""

from __future__ import annotations

import copy
import threading
from pathlib import Path

from ade_tasks.db import run_events as run_events_db
from ade_tasks.db import runs as runs_db
from ade_tasks.db.engine import SessionFactory
from ade_tasks.runs.dispatch import dispatch
from ade_tasks.testing import InMemorySender
from ade_workers.engine.runner import execute_run
from ade_workers.engine.runner_config import RunnerConfig
from tests.conftest import write_rule
from tests.fake_llm import Reply, ScriptedModelServer
from tests.integration.agent_run_support import (  # noqa: F401 (fixtures)
    RECORDED,
    config,
    llm,
    rules_dir,
    session_factory,
)
from tests.integration.conftest import Cluster
from tests.integration.test_cancel import DEFAULT_TIMING
from tests.integration.test_run_path import finished, run_row
from tests.support import host_pid, pid_alive, wait_until
from tests.unit.ade_tasks.runs.test_concurrency_keys import pushed
from tests.unit.conftest import add_rule

KEYED = """
id: fix
triggers: [{type: github.pr_updated}]
concurrency: {key: "pr-{{trigger.repo}}#{{trigger.number}}", on_new: supersede}
"""


def test_supersede_ends_the_running_command_and_the_new_run_completes(
    cluster: Cluster, project: Path
) -> None:
    # Given a worker running a long command for a push to PR 7 (a later push runs quickly)
    write_rule(cluster.tmp / "rules", "fix.yaml", KEYED + """
execution:
  kind: built-in
  actions:
    - {id: fix, type: run-command, command: "echo $$ >> pids; test {{trigger.head_sha}} = new || exec sleep 60"}
""")  # fmt: skip
    cluster.sync_rules(cluster.tmp / "rules")
    worker = cluster.worker(env=DEFAULT_TIMING)
    sender = cluster.sender()
    first = dispatch(cluster.session_factory, sender, "fix", pushed(7, "d1", sha="old")).run.id
    pids = project / "pids"
    pid = wait_until(
        lambda: pids.exists() and host_pid(int(pids.read_text().split()[0]), worker.pid), 20, "it"
    )
    wait_until(lambda: run_row(cluster, first).status == "running", 10, "the run to run")

    # When a new push to the same PR arrives
    second = dispatch(cluster.session_factory, sender, "fix", pushed(7, "d2", sha="new")).run.id

    # Then the running command is gone, the first run is cancelled with the reason (and its
    # transcript says by which run), and the new run completes
    wait_until(lambda: not pid_alive(pid), 5, "the superseded command to be killed")
    assert (run_row(cluster, first).status, run_row(cluster, first).error) == (
        "cancelled",
        f"superseded by run {second}",
    )
    assert finished(cluster, second).status == "succeeded"
    with cluster.session_factory() as session:
        (cancelled,) = run_events_db.events_of(session, first, "run.cancelled")
    assert cancelled[1] == {
        "by": f"run {second}",
        "note": "concurrency key 'pr-acme/api#7', on_new: supersede",
        "was": "running",
    }


def model_turn(content: str, *calls: tuple[str, str, str]) -> dict[str, object]:
    body = copy.deepcopy(RECORDED)
    message = body["choices"][0]["message"]
    message["content"] = content
    message["tool_calls"] = [
        {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}
        for cid, name, args in calls
    ]
    return body


def test_supersede_ends_an_http_agent_session_and_keeps_its_turns(
    session_factory: SessionFactory,  # noqa: F811
    rules_dir: Path,  # noqa: F811
    config: RunnerConfig,  # noqa: F811
    llm: ScriptedModelServer,  # noqa: F811
) -> None:
    # Given an agent session whose model is answering its first turn (slowly)
    add_rule(session_factory, rules_dir, "fix", KEYED + """
execution:
  kind: agent-session
  provider: openai
  model: gpt-4o-mini
  permission_mode: plan
  tool_palette: [repo]
  prompt: "Fix PR {{trigger.number}}"
""")  # fmt: skip
    turn = model_turn("Reading the failing test first.", ("c1", "read_file", '{"path": "x"}'))
    llm.script(Reply(body=turn, delay=1.5))
    sender = InMemorySender()
    first = dispatch(session_factory, sender, "fix", pushed(7, "d1")).run.id
    agent = threading.Thread(target=execute_run, args=(session_factory, config, first, "w1"))
    agent.start()
    wait_until(lambda: len(llm.requests) == 1, 20, "the session's first model call")

    # When a new push to the same PR supersedes it
    second = dispatch(session_factory, sender, "fix", pushed(7, "d2")).run.id
    agent.join(30)

    # Then the session ended without another model call and without running the turn's tool;
    # the run is cancelled with the reason, the turn it had is in its events
    assert not agent.is_alive()
    assert len(llm.requests) == 1
    with session_factory() as session:
        events = run_events_db.events_of(session, first, "agent.")
        run = runs_db.get_run(session, first)
    assert (run.status, run.error) == ("cancelled", f"superseded by run {second}")
    turns = [data for kind, data in events if kind == "agent.model_turn"]
    assert [t["text"] for t in turns] == ["Reading the failing test first."]
    assert not any(kind == "agent.tool_result" for kind, _ in events)


def test_a_turn_answered_right_after_the_supersede_runs_no_tool(
    session_factory: SessionFactory,  # noqa: F811
    rules_dir: Path,  # noqa: F811
    config: RunnerConfig,  # noqa: F811
    llm: ScriptedModelServer,  # noqa: F811
) -> None:
    """The run monitor looks for a cancel every half second; a model answer that arrives
    sooner after the supersede must still not have its tool run (the session asks the
    database before it acts on a turn)."""
    add_rule(session_factory, rules_dir, "fix", KEYED + """
execution:
  kind: agent-session
  provider: openai
  model: gpt-4o-mini
  permission_mode: plan
  tool_palette: [repo]
  prompt: "Fix PR {{trigger.number}}"
""")  # fmt: skip
    answer = threading.Event()
    turn = model_turn("Reading the failing test first.", ("c1", "read_file", '{"path": "x"}'))
    llm.script(Reply(body=turn, gate=answer))
    sender = InMemorySender()
    first = dispatch(session_factory, sender, "fix", pushed(7, "d1")).run.id
    agent = threading.Thread(target=execute_run, args=(session_factory, config, first, "w1"))
    agent.start()
    wait_until(lambda: len(llm.requests) == 1, 20, "the session's first model call")

    dispatch(session_factory, sender, "fix", pushed(7, "d2"))
    answer.set()  # at once: the monitor has most likely not looked yet
    agent.join(30)

    with session_factory() as session:
        events = run_events_db.events_of(session, first, "agent.")
    assert [kind for kind, _ in events if kind.startswith("agent.")] == ["agent.model_turn"]
