"""The `github` and `notify` palettes as rules and settings see them: a notify palette without
a webhook is refused when the rule is loaded, and pushes go to GitHub's web host."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from ade_tasks.agents.policy import Policy, decide
from ade_tasks.rules.agent import AgentSession
from ade_tasks.rules.rule import Rule
from ade_tasks.settings import GithubSettings


def _rule(palette: list[str], **outputs: Any) -> dict[str, Any]:
    return {
        "id": "fixer",
        "triggers": [{"type": "manual"}],
        "execution": {
            "kind": "built-in",
            "actions": [
                {
                    "type": "agent-session",
                    "provider": "openai",
                    "model": "gpt-4.1",
                    "prompt": "fix it",
                    "tool_palette": palette,
                }
            ],
        },
        "outputs": outputs,
    }


def test_a_notify_palette_without_a_webhook_is_refused_at_validation() -> None:
    with pytest.raises(ValidationError, match=r"tool_palette notify .* outputs.notify_url"):
        Rule.model_validate(_rule(["repo", "notify"]))


def test_a_notify_palette_with_a_webhook_and_a_github_palette_validate() -> None:
    rule = Rule.model_validate(_rule(["notify", "github"], notify_url="${env:HOOK}"))
    assert rule.execution.actions[0].tool_palette == ["notify", "github"]  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("api_url", "git_url", "expected"),
    [
        ("https://api.github.com", None, "https://github.com"),
        ("https://ghe.example.com/api/v3", None, "https://ghe.example.com"),
        ("https://api.github.com", "http://127.0.0.1:9/git/", "http://127.0.0.1:9/git"),
    ],
)
def test_pushes_go_to_the_web_host_of_the_api_or_the_configured_git_url(
    api_url: str, git_url: str | None, expected: str
) -> None:
    assert GithubSettings(api_url=api_url, git_url=git_url).effective_git_url == expected


def test_codex_with_the_github_palette_is_refused_not_left_toolless() -> None:
    document = _rule(["repo", "github"])
    document["execution"]["actions"][0]["provider"] = "codex"
    with pytest.raises(ValidationError, match="provider codex cannot call yet"):
        Rule.model_validate(document)


def test_claude_code_with_the_github_palette_validates() -> None:
    document = _rule(["repo", "github"])
    document["execution"]["actions"][0].update(provider="claude-code", model="claude-sonnet-4-5")
    Rule.model_validate(document)  # it reaches them through the engine's MCP bridge


@pytest.mark.parametrize("name", ["pr-fixer", "pr-fixer-claude"])
def test_the_docs_pr_fixer_rules_validate(name: str) -> None:
    docs = (Path(__file__).resolve().parents[4] / "docs" / "agents.md").read_text()
    block = docs.split(f"# config/rules/{name}.yaml\n", 1)[1].split("```", 1)[0]
    rule = Rule.model_validate(yaml.safe_load(block))
    assert "github" in rule.execution.actions[2].tool_palette  # type: ignore[union-attr]
    _reads_edits_and_tests(rule.execution.actions[2], name)  # type: ignore[arg-type]


def _reads_edits_and_tests(session: AgentSession, where: str) -> None:
    """A fixing session's policy lets it read and rewrite a file of its worktree and run the
    tests without an approval. A stated `allowed_tools` replaces the default read-only list:
    the recipe once said `allowed_tools: [bash]`, which denied `read_file`, so Claude Code,
    whose `Write` refuses a file it has not read, could change no file."""
    policy = Policy.from_rule(session.policy, session.permission_mode)
    worktree = Path("/nonexistent-worktree")
    verdicts = {
        tool: decide(policy, tool, paths=paths, worktree=worktree).verdict
        for tool, paths in [("read_file", ["a.py"]), ("write_file", ["a.py"]), ("bash", [])]
    }
    assert verdicts == dict.fromkeys(verdicts, "allow"), (where, verdicts)


def test_the_docs_label_rules_start_on_the_label_not_on_every_push() -> None:
    """docs/agents.md's pr-fixer and durable-thread examples use `github.pr_labeled` with
    `label:` (issue 36, finding 1), not `github.pr_updated` + `labels:`, which also fires on
    every push to a labelled PR."""
    docs = (Path(__file__).resolve().parents[4] / "docs" / "agents.md").read_text()
    for marker in ("# config/rules/pr-fixer.yaml\n", "# config/rules/pr-fix.yaml\n"):
        block = docs.split(marker, 1)[1].split("---\n", 1)[0].split("```", 1)[0]
        (trigger,) = Rule.model_validate(yaml.safe_load(block)).triggers
        assert (trigger.type, trigger.label) == ("github.pr_labeled", ["agent-fix"]), marker


def test_the_recipe_rules_validate_and_share_one_thread_per_pull_request() -> None:
    """docs/recipes/pr-agent-loop.md's rule files (tests/integration/test_pr_agent_loop.py
    runs them end to end): valid, one thread and one concurrency key per pull request."""
    recipe = Path(__file__).resolve().parents[4] / "docs" / "recipes" / "pr-agent-loop.md"
    blocks = re.findall(r"```yaml\n(.*?)```", recipe.read_text(), re.S)
    rules = [Rule.model_validate(yaml.safe_load(block)) for block in blocks]
    assert [rule.id for rule in rules] == ["pr-fixer", "pr-review-answer"]
    key = "pr-{{trigger.repo}}#{{trigger.number}}"
    for rule in rules:
        session = rule.execution.actions[-1]  # type: ignore[union-attr]
        assert session.thread == key and "github" in session.tool_palette
        _reads_edits_and_tests(session, rule.id)
        assert rule.concurrency is not None and rule.concurrency.key == key
