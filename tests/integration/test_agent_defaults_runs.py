"""A rule's `agent:` defaults in a real run: a chain's agent steps that restate nothing run with
the rule's provider, model and mode, one step overrides a field and adds a denial to the rule's
policy (SQLite, the real runner, a scripted OpenAI-compatible server on 127.0.0.1)."""

from __future__ import annotations

from pathlib import Path

from ade_tasks.db.engine import SessionFactory
from ade_tasks.runs.dispatch import dispatch
from ade_tasks.runs.trigger_events import TriggerEvent
from ade_tasks.states import RunStatus
from ade_tasks.testing import InMemorySender
from ade_workers.engine.runner import execute_run
from ade_workers.engine.runner_config import RunnerConfig
from tests.fake_llm import ScriptedModelServer
from tests.integration.agent_run_support import config, llm, rules_dir, session_factory, text
from tests.unit.conftest import add_rule

__all__ = ["config", "llm", "rules_dir", "session_factory"]  # the fixtures this module uses


def test_agent_steps_inherit_the_rules_model_mode_and_policy(
    session_factory: SessionFactory, rules_dir: Path, config: RunnerConfig, llm: ScriptedModelServer
) -> None:
    add_rule(session_factory, rules_dir, "two-agents", """
id: two-agents
triggers: [{type: manual}]
agent:
  provider: openai
  model: gpt-4o-mini
  permission_mode: edit
  policy: {allowed_tools: [read_file, write_file], denied_tools: [grep]}
execution:
  kind: built-in
  actions:
    - {id: write, type: agent-session, prompt: "Write the notes"}
    - id: check
      type: agent-session
      prompt: "Check the notes"
      model: gpt-4.1-mini
      policy: {denied_tools: [write_file]}
""")  # fmt: skip
    llm.script(text("notes written"), text("notes checked"))
    run_id = dispatch(session_factory, InMemorySender(), "two-agents", TriggerEvent.manual()).run.id

    assert execute_run(session_factory, config, run_id, "w1") == RunStatus.SUCCEEDED

    first, second = (request.json for request in llm.requests)
    offered = [{tool["function"]["name"] for tool in r["tools"]} for r in (first, second)]
    assert (first["model"], second["model"]) == ("gpt-4o-mini", "gpt-4.1-mini")
    assert "write_file" in offered[0] and "grep" not in offered[0]  # edit mode, the rule's policy
    assert "write_file" not in offered[1] and "grep" not in offered[1]  # denials accumulate
    assert "edit_file" in offered[1]  # still edit mode: the step overrode only what it named
