"""The `github` palette's tools against a scripted GitHub on 127.0.0.1 (`tests.fake_github`):
REST, GraphQL review threads, checks with logs, and `git push` to a real bare repository over
`git http-backend`. Each tool, each fault the issue names (403 missing scope, 404 PR gone,
409 and a moved branch, a secondary rate limit with Retry-After, a fork's PR, a protected
branch, a run without a PR), idempotency by run and call id, and the token never reaching
what the agent sees."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from ade_tasks.agents.policy import Policy
from ade_tasks.retry import RetryPolicy
from ade_tasks.secrets import Masker
from ade_tasks.settings import GithubSettings
from ade_workers.agents.http_session import STARTED_EVENT, SessionLimits, run_session
from ade_workers.agents.providers.openai import OpenAIProvider
from ade_workers.agents.tools.registry import run_tool
from ade_workers.agents.tools.tool import RunLink, ToolContext, ToolResult
from tests.fake_github import MISSING_SCOPE, SECONDARY_RATE_LIMIT, FakeGithub
from tests.fake_http import ScriptedServer
from tests.fake_llm import Reply, ScriptedModelServer

TOKEN = "ghp_palette0123456789secretTOKEN"
REPO = "acme/widgets"
GIT_ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.com",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.com",
}


def _git(cwd: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(cwd), *args],
        env={"PATH": "/usr/bin:/bin", "HOME": str(cwd), **GIT_ENV},
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def _commit(cwd: Path, name: str, text: str) -> str:
    (cwd / name).write_text(text)
    _git(cwd, "add", "-A")
    _git(cwd, "commit", "-q", "-m", f"change {name}")
    return _git(cwd, "rev-parse", "HEAD")


@dataclass
class Setup:
    """The scripted GitHub with one PR (feature -> main), and a lane cloned from it."""

    server: FakeGithub
    bare: Path
    lane: Path
    number: int
    ctx: ToolContext

    def call(
        self, tool: str, args: dict[str, Any] | None = None, call_id: str = "c1"
    ) -> ToolResult:
        return run_tool(tool, args or {}, self.ctx, call_id)

    def link(self, **changes: Any) -> None:
        assert self.ctx.run is not None
        self.ctx.run = RunLink(**{**self.ctx.run.__dict__, **changes})


@pytest.fixture
def gh(tmp_path: Path) -> Iterator[Setup]:
    with FakeGithub(token=TOKEN, root=tmp_path, repos=[REPO]) as server:
        bare = server.git_repo(REPO)
        seed = tmp_path / "seed"
        seed.mkdir()
        _git(seed, "init", "-q", "-b", "main")
        _commit(seed, "app.py", "print('hello')\n")
        _git(seed, "push", "-q", str(bare), "main")
        _git(seed, "checkout", "-q", "-b", "feature")
        _commit(seed, "app.py", "print('hello, world')\n")
        _git(seed, "push", "-q", str(bare), "feature")
        pull = server.seed_pull(REPO, "Fix greeting", created_at="2024-01-01T00:00:00Z")
        lane = tmp_path / "lane"
        _git(tmp_path, "clone", "-q", "-b", "feature", str(bare), str(lane))
        settings = GithubSettings(
            api_url=server.url, token=SecretStr(TOKEN), git_url=server.git_url
        )
        link = RunLink(
            run_id="run1",
            github=settings,
            repo=REPO,
            number=pull["number"],
            lane_branch="ade/lane-1",
            lane_base="main",
        )
        ctx = ToolContext(
            worktree=lane, env={}, masker=Masker.none().with_values([TOKEN]), run=link
        )
        yield Setup(server, bare, lane, pull["number"], ctx)


# --- reads ------------------------------------------------------------------------------------


def test_github_pr_shows_the_changed_files_with_each_hunk_capped(gh: Setup) -> None:
    long_hunk = "@@ -1,1 +1,400 @@\n" + "".join(f"+line {i}\n" for i in range(400))
    gh.server.set_files(
        REPO,
        gh.number,
        [
            {
                "filename": "app.py",
                "patch": "@@ -1 +1 @@\n-print('hello')\n+print('hi')\n" + long_hunk,
            }
        ],
    )
    result = gh.call("github_pr")
    assert result.ok, result.content
    assert "PR acme/widgets#1: Fix greeting" in result.content
    assert "+print('hi')" in result.content  # the first hunk whole
    assert "characters cut" in result.content  # the long one capped at 2,000
    assert "+line 399" not in result.content
    assert result.data["files"] == ["app.py"]


def test_github_checks_lists_failed_steps_and_the_log_tail(gh: Setup) -> None:
    sha = gh.server.head_of(REPO, "feature")
    assert sha is not None
    log = "".join(f"2024-01-01T00:00:{i % 60:02d}.0000000Z noise {i}\n" for i in range(2000))
    log += "2024-01-01T00:01:00.0000000Z FAILED tests/test_app.py::test_greeting\n"
    gh.server.add_check(REPO, sha, "lint", "success")
    gh.server.add_check(REPO, sha, "tests", "failure", log=log, failed_steps=("Run pytest",))
    gh.server.add_check(REPO, sha, "external", "failure", actions=False, summary="2 issues")
    result = gh.call("github_checks")
    assert result.ok, result.content
    assert "3 check runs" in result.content and "2 failed" in result.content
    assert "failed steps: Run pytest" in result.content
    assert "FAILED tests/test_app.py::test_greeting" in result.content
    assert "noise 10\n" not in result.content  # only the tail, timestamps stripped
    assert "2024-01-01T00:01:00" not in result.content
    assert "2 issues" in result.content  # a non-Actions check shows its output


def test_threads_are_listed_replied_to_once_and_resolved(gh: Setup) -> None:
    thread = gh.server.add_thread(REPO, gh.number, "Please rename `x`.", path="app.py", line=1)
    listed = gh.call("github_threads")
    assert listed.ok and thread in listed.content and "Please rename `x`." in listed.content

    first = gh.call("github_reply", {"thread_id": thread, "body": "Renamed."}, call_id="c7")
    again = gh.call("github_reply", {"thread_id": thread, "body": "Renamed."}, call_id="c7")
    resolved = gh.call("github_resolve", {"thread_id": thread}, call_id="c8")

    assert first.ok and again.ok and resolved.ok
    assert "already replied" in again.content
    comments = gh.server.threads[thread]["comments"]
    assert [c["body"] for c in comments[1:]] == ["Renamed.\n\n<!-- ade:run=run1 call=c7 -->"]
    assert gh.server.threads[thread]["isResolved"] is True
    assert gh.call("github_threads").content.startswith("0 unresolved")


def test_a_thread_of_another_pull_request_is_refused(gh: Setup) -> None:
    other = gh.server.seed_pull(REPO, "Other", created_at="2024-01-02T00:00:00Z", head="other")
    thread = gh.server.add_thread(REPO, other["number"], "Not yours.")
    result = gh.call("github_resolve", {"thread_id": thread})
    assert not result.ok and "not a review thread of PR acme/widgets#1" in result.content
    assert gh.server.threads[thread]["isResolved"] is False


# --- writes and idempotency -------------------------------------------------------------------


def test_a_comment_with_the_same_run_and_call_id_is_posted_once(gh: Setup) -> None:
    first = gh.call("github_comment", {"body": "Fixed in the latest push."}, call_id="c3")
    again = gh.call("github_comment", {"body": "Fixed in the latest push."}, call_id="c3")
    other = gh.call("github_comment", {"body": "Second note."}, call_id="c4")
    assert first.ok and again.ok and other.ok
    bodies = gh.server.comment_bodies(REPO, gh.number)
    assert bodies == [
        "Fixed in the latest push.\n\n<!-- ade:run=run1 call=c3 -->",
        "Second note.\n\n<!-- ade:run=run1 call=c4 -->",
    ]


def test_a_resumed_session_runs_an_interrupted_comment_again_and_posts_once(gh: Setup) -> None:
    # Given a session whose worker died after its github_comment call reached GitHub
    call = {"id": "call_9", "name": "github_comment", "arguments": {"body": "Done."}}
    assert gh.call("github_comment", {"body": "Done."}, call_id="call_9").ok
    history: list[tuple[str, dict[str, Any]]] = [
        ("agent.model_turn", {"text": "", "tool_calls": [call], "usage": {}}),
        (STARTED_EVENT, {"tool_call_id": "call_9", "tool": "github_comment"}),
    ]
    events: list[tuple[str, dict[str, Any]]] = []
    with ScriptedModelServer() as model:
        model.script(_final("All done."))
        with closing(_provider(model)) as provider:
            outcome = run_session(
                provider,
                model="gpt-test",
                max_tokens_per_turn=512,
                system="s",
                prompt="p",
                tools=["github_comment", "report"],
                policy=Policy.from_rule(_policy(), "edit"),
                tool_ctx=gh.ctx,
                limits=_limits(),
                history=history,
                record=lambda kind, data: events.append((kind, data)),
            )
    # Then the call ran again, found its comment, and nothing was posted twice
    assert outcome.status == "completed", outcome.error
    result = next(d for k, d in events if k == "agent.tool_result")
    assert result["ok"] and "already commented" in result["content"]
    assert len(gh.server.comment_bodies(REPO, gh.number)) == 1


def test_rerun_checks_reruns_a_failed_workflow_once(gh: Setup) -> None:
    sha = gh.server.head_of(REPO, "feature")
    assert sha is not None
    gh.server.add_check(REPO, sha, "tests", "failure", log="boom\n")
    first = gh.call("github_rerun_checks")
    again = gh.call("github_rerun_checks", call_id="c2")
    assert first.ok and "failed jobs re-run" in first.content
    assert "already queued" in again.content
    assert len(gh.server.reruns) == 1


def test_push_fast_forwards_the_pr_branch_and_the_token_stays_out_of_sight(gh: Setup) -> None:
    (gh.lane / "app.py").write_text("print('hello, reviewer')\n")
    result = gh.call("github_push", {"commit_message": "Address review"})
    assert result.ok, result.content
    head = _git(gh.lane, "rev-parse", "HEAD")
    assert gh.server.head_of(REPO, "feature") == head
    assert _git(gh.lane, "log", "-1", "--format=%s") == "Address review"
    # The push authenticated with the token, which appears nowhere the agent can look.
    pushes = [c for c in gh.server.calls if c.path.endswith("git-receive-pack")]
    assert pushes and all(c.headers.get("authorization", "").startswith("Basic ") for c in pushes)
    assert TOKEN not in result.content and TOKEN not in json.dumps(result.data)
    assert TOKEN not in (gh.lane / ".git" / "config").read_text()
    assert TOKEN not in _git(gh.lane, "config", "--list", "--show-origin")
    assert gh.call("github_push", call_id="c2").content.endswith("nothing new to push")


def test_push_refuses_uncommitted_changes_without_a_message(gh: Setup) -> None:
    (gh.lane / "app.py").write_text("changed\n")
    result = gh.call("github_push")
    assert not result.ok and "uncommitted changes" in result.content


def test_push_refuses_when_the_branch_moved(gh: Setup, tmp_path: Path) -> None:
    # Given someone pushes to the PR's branch while the agent works
    human = tmp_path / "human"
    _git(tmp_path, "clone", "-q", "-b", "feature", str(gh.bare), str(human))
    theirs = _commit(human, "other.py", "x = 1\n")
    _git(human, "push", "-q", "origin", "feature")
    _commit(gh.lane, "app.py", "print('mine')\n")
    # When the agent pushes, then the push is refused, and their commit stays
    result = gh.call("github_push")
    assert not result.ok
    assert "moved" in result.content and "never force-pushes" in result.content
    assert gh.server.head_of(REPO, "feature") == theirs


def test_push_answered_409_tells_the_agent_the_branch_moved(gh: Setup) -> None:
    before = gh.server.head_of(REPO, "feature")
    _commit(gh.lane, "app.py", "print('mine')\n")
    gh.server.fail_next(409, method="POST", path_prefix="/git/")
    result = gh.call("github_push")
    assert not result.ok and "moved" in result.content
    assert gh.server.head_of(REPO, "feature") == before


def test_push_to_a_fork_pr_is_refused_and_said_so(gh: Setup) -> None:
    gh.server.fork_pull(REPO, gh.number, "someone/widgets")
    _commit(gh.lane, "app.py", "print('mine')\n")
    result = gh.call("github_push")
    assert not result.ok and "comes from a fork (someone/widgets)" in result.content
    assert not [c for c in gh.server.calls if c.path.startswith("/git/")]


def test_push_to_a_protected_branch_is_refused(gh: Setup) -> None:
    gh.server.protect(REPO, "feature")
    _commit(gh.lane, "app.py", "print('mine')\n")
    result = gh.call("github_push")
    assert not result.ok and "protected branch" in result.content
    assert not [c for c in gh.server.calls if c.path.startswith("/git/")]


def test_open_pr_pushes_the_lane_branch_and_opens_one_draft(gh: Setup) -> None:
    _commit(gh.lane, "app.py", "print('draft')\n")
    args = {"title": "Agent fix", "body": "What I changed."}
    first = gh.call("github_open_pr", args, call_id="c5")
    again = gh.call("github_open_pr", args, call_id="c5")
    assert first.ok and again.ok, (first.content, again.content)
    assert gh.server.head_of(REPO, "ade/lane-1") == _git(gh.lane, "rev-parse", "HEAD")
    drafts = [p for p in gh.server.open_pulls(REPO) if p["head"]["ref"] == "ade/lane-1"]
    assert len(drafts) == 1 and drafts[0]["draft"] is True
    assert "<!-- ade:run=run1 call=c5 -->" in drafts[0]["body"]


# --- faults -----------------------------------------------------------------------------------


def test_403_missing_scope_says_which_scope(gh: Setup) -> None:
    gh.server.fail_next(
        403,
        headers=MISSING_SCOPE,
        message="Resource not accessible by personal access token",
        method="POST",
    )
    result = gh.call("github_comment", {"body": "hi"})
    assert not result.ok
    assert "403" in result.content and "needs one of: repo" in result.content
    assert TOKEN not in result.content
    assert gh.server.comment_bodies(REPO, gh.number) == []


def test_404_when_the_pr_is_gone(gh: Setup) -> None:
    gh.server.fail_next(404, path_prefix=f"/repos/{REPO}/pulls/{gh.number}")
    result = gh.call("github_pr")
    assert not result.ok and "404" in result.content


def test_422_on_open_pr_is_told_to_the_agent(gh: Setup) -> None:
    gh.server.fail_next(
        422, method="POST", path_prefix=f"/repos/{REPO}/pulls", message="No commits"
    )
    result = gh.call("github_open_pr", {"title": "t", "body": "b"})
    assert not result.ok and "422" in result.content and "No commits" in result.content


def test_a_secondary_rate_limit_is_waited_out_with_retry_after(gh: Setup) -> None:
    gh.server.fail_next(
        403, headers={"Retry-After": "1"}, message=SECONDARY_RATE_LIMIT, method="POST"
    )
    started = time.monotonic()
    result = gh.call("github_comment", {"body": "after the limit"})
    assert result.ok, result.content
    assert time.monotonic() - started >= 1.0
    assert len(gh.server.comment_bodies(REPO, gh.number)) == 1
    assert len(gh.server.requests_to("POST", f"/repos/{REPO}/issues")) == 2


def test_a_run_without_a_pull_request_is_told_so(gh: Setup) -> None:
    gh.link(number=None)
    for tool in ("github_pr", "github_threads", "github_checks", "github_comment", "github_push"):
        args = {"body": "x"} if tool == "github_comment" else {}
        result = gh.call(tool, args)
        assert not result.ok and "names no pull request" in result.content, tool


# --- through an HTTP provider -----------------------------------------------------------------


def test_an_openai_agent_reads_the_failing_check_and_comments(gh: Setup) -> None:
    sha = gh.server.head_of(REPO, "feature")
    assert sha is not None
    gh.server.add_check(
        REPO,
        sha,
        "tests",
        "failure",
        log="E   AssertionError: greeting\n",
        failed_steps=("pytest",),
    )
    events: list[tuple[str, dict[str, Any]]] = []
    with ScriptedModelServer() as model:
        model.script(
            _tool_call("call_1", "github_checks", {}),
            _tool_call("call_2", "github_comment", {"body": "The greeting test fails."}),
            _final("Commented."),
        )
        with closing(_provider(model)) as provider:
            outcome = run_session(
                provider,
                model="gpt-test",
                max_tokens_per_turn=512,
                system="s",
                prompt="Why does CI fail?",
                tools=["github_checks", "github_comment", "report"],
                policy=Policy.from_rule(_policy(), "edit"),
                tool_ctx=gh.ctx,
                limits=_limits(),
                history=[],
                record=lambda kind, data: events.append((kind, data)),
            )
        sent = model.requests[2].json["messages"]
    assert outcome.status == "completed", outcome.error
    check_result = next(m for m in sent if m["role"] == "tool" and m["tool_call_id"] == "call_1")
    assert "AssertionError: greeting" in check_result["content"]
    assert gh.server.comment_bodies(REPO, gh.number) == [
        "The greeting test fails.\n\n<!-- ade:run=run1 call=call_2 -->"
    ]
    assert [d["tool"] for k, d in events if k == "agent.tool_result"] == [
        "github_checks",
        "github_comment",
    ]
    assert TOKEN not in json.dumps(events) and TOKEN not in json.dumps(
        [r.json for r in model.requests]
    )


def _provider(model: ScriptedModelServer) -> OpenAIProvider:
    return OpenAIProvider(
        base_url=f"{model.url}/v1", api_key="sk-test", policy=RetryPolicy(attempts=1)
    )


def _policy() -> Any:
    from ade_tasks.rules.agent import ToolPolicy

    return ToolPolicy()


def _limits() -> SessionLimits:
    return SessionLimits(max_turns=10, max_tokens=None, deadline=time.monotonic() + 60)


def _completion(message: dict[str, Any], reason: str) -> Reply:
    return Reply(
        body={
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1,
            "model": "gpt-test",
            "choices": [{"index": 0, "message": message, "finish_reason": reason}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        }
    )


def _tool_call(call_id: str, name: str, args: dict[str, Any]) -> Reply:
    call = {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args)},
    }
    message = {"role": "assistant", "content": None, "tool_calls": [call]}
    return _completion(message, "tool_calls")


def _final(text: str) -> Reply:
    return _completion({"role": "assistant", "content": text}, "stop")


def test_notify_posts_to_the_rules_webhook_with_the_run_and_call(gh: Setup) -> None:
    with ScriptedServer("webhook") as hook:
        gh.link(notify_url=f"{hook.url}/hooks/T/B/secret")
        result = gh.call("notify", {"text": "PR #1 fixed"}, call_id="c9")
        posted = hook.requests_to("POST")
    assert result.ok, result.content
    assert [r.json for r in posted] == [{"text": "PR #1 fixed\n(ade run run1 call c9)"}]
    assert "secret" not in result.content
