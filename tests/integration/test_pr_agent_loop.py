"""The pull-request agent loop of issue 36, end to end, with the rules of the recipe
(docs/recipes/pr-agent-loop.md, loaded from its YAML blocks so the docs cannot drift).

Everything is real but GitHub and the model: signed deliveries through a real `ade-tasks api`,
a real `celery worker` (ingress and run queues) on PostgreSQL and Redis, a real git project whose
pull request's branch lives in the scripted GitHub's bare repository (`tests.fake_github`: REST,
GraphQL threads, `git http-backend`), and a scripted Anthropic Messages server
(`ade_api.dev_model`) answering the `anthropic` HTTP provider, and the real `claude` CLI
(`tests.real_clis`: skipped locally without it, failed under CI).

The model's turns are written once, provider-neutral (`Agent`), in the Anthropic shape both
read: the HTTP provider calls the engine's `github_*`, `write_file` and `bash`; Claude Code calls
the same GitHub tools as `mcp__ade__github_*` (through the engine's MCP bridge) and its own
`Write` and `Bash` (in the session's sandbox). The recipe's rule files are the same for both: the
test swaps only the provider and the model.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from sqlalchemy import select

from ade_api.dev_model import ScriptedAnthropic, Turn
from ade_tasks.db import lanes as lanes_db
from ade_tasks.db import run_events as run_events_db
from ade_tasks.db.schema import LaneRow, RunRow
from tests.fake_github import FakeGithub
from tests.fixtures import GITHUB_FIXTURES
from tests.integration.conftest import Cluster
from tests.integration.test_github_palette import _commit, _git
from tests.integration.test_run_path import finished, run_row
from tests.integration.test_webhooks import SECRET, deliver, events
from tests.real_clis import real_cli
from tests.support import Child, wait_until

RECIPE = Path(__file__).resolve().parents[2] / "docs" / "recipes" / "pr-agent-loop.md"
REPO = "acme/widgets"
BRANCH = "fix-greeting"
BOT = "ade-bot[bot]"
HUMAN = "Codertocat"
TOKEN = "ghp_loop0123456789secretTOKEN"
FIXED = 'def greet(name):\n    return f"Hello, {name}!"\n'
FAILURE = (
    "FAIL: test_greet (test_greeting.GreetTest.test_greet)\n"
    "AssertionError: 'Hello, Ada' != 'Hello, Ada!'\n"
)
QUESTION = "Is the exclamation mark intended?"


@dataclass(frozen=True)
class Agent:
    """A provider and how it names the tools the scripted turns call: the one place tool names
    live. The engine's GitHub tools are `github_*` to an HTTP provider and `mcp__ade__github_*`
    to Claude Code; writing a file and running a command are the engine's `write_file` / `bash`
    or the CLI's own `Write` / `Bash`. `cli` names the real binary a CLI provider runs."""

    provider: str
    model: str
    github_prefix: str = ""
    read_tool: tuple[str, str] = ("read_file", "path")  # name, path argument
    write_tool: tuple[str, str] = ("write_file", "path")
    shell_tool: str = "bash"
    cli: str | None = None

    def github(self, tool: str, **args: Any) -> Turn:
        return Turn.tool(self.github_prefix + tool, **args)

    def rewrite(self, path: str, content: str) -> tuple[Turn, Turn]:
        """Read a file, then write it whole (Claude Code's `Write` refuses a file not read)."""
        (read, read_path), (write, write_path) = self.read_tool, self.write_tool
        return Turn.tool(read, **{read_path: path}), Turn.tool(
            write, **{write_path: path, "content": content}
        )

    def shell(self, command: str) -> Turn:
        return Turn.tool(self.shell_tool, command=command)


AGENTS = [
    Agent("anthropic", "claude-sonnet-4-5"),
    Agent(
        "claude-code",
        "claude-test",
        github_prefix="mcp__ade__",
        read_tool=("Read", "file_path"),
        write_tool=("Write", "file_path"),
        shell_tool="Bash",
        cli="claude",
    ),
]


def recipe_rules(agent: Agent) -> dict[str, dict[str, Any]]:
    """The recipe's rule files by name, each running on `agent`'s provider and model."""
    found = {}
    for block in re.findall(r"```yaml\n(.*?)```", RECIPE.read_text(), re.S):
        name = block.splitlines()[0].removeprefix("# config/rules/")
        document = yaml.safe_load(block)
        document["agent"].update(provider=agent.provider, model=agent.model)
        found[name] = document
    assert sorted(found) == ["pr-fixer.yaml", "pr-review-answer.yaml"], found
    return found


# --- the repository and the deliveries -----------------------------------------------------


def seed_repository(server: FakeGithub, project: Path, tmp: Path) -> str:
    """`main` with a greeting and its test; the PR's branch changes the test, so its check
    fails; the project is a clone whose origin is the scripted GitHub. The branch's head sha."""
    bare = server.git_repo(REPO)
    seed = tmp / "seed"
    seed.mkdir()
    _git(seed, "init", "-q", "-b", "main")
    test = (
        "import unittest\n\nfrom greeting import greet\n\n\n"
        "class GreetTest(unittest.TestCase):\n    def test_greet(self):\n"
        "        self.assertEqual(greet('Ada'), 'Hello, Ada')\n"
    )
    (seed / "test_greeting.py").write_text(test)
    (seed / ".gitignore").write_text("__pycache__/\n")  # github_push commits all but ignored files
    _commit(seed, "greeting.py", 'def greet(name):\n    return f"Hello, {name}"\n')
    _git(seed, "push", "-q", str(bare), "main")
    _git(seed, "checkout", "-q", "-b", BRANCH)
    head = _commit(seed, "test_greeting.py", test.replace("'Hello, Ada'", "'Hello, Ada!'"))
    _git(seed, "push", "-q", str(bare), BRANCH)
    _git(tmp, "clone", "-q", str(bare), str(project))
    _git(project, "remote", "set-url", "origin", f"{server.git_url}/{REPO}.git")
    return head


def human_push(server: FakeGithub, tmp: Path, text: str) -> str:
    """A person's commit on the PR's branch, pushed to the scripted GitHub; its sha."""
    clone = tmp / "human"
    if not clone.exists():
        _git(tmp, "clone", "-q", "-b", BRANCH, str(server.git_repo(REPO)), str(clone))
    _git(clone, "pull", "-q", "--ff-only")
    sha = _commit(clone, "NOTES.md", text)
    _git(clone, "push", "-q", "origin", BRANCH)
    return sha


def on_our_pull(payload: dict[str, Any], number: int, head_sha: str) -> dict[str, Any]:
    """GitHub's example delivery, moved to our repository, pull request and branch."""
    payload = copy.deepcopy(payload)
    owner, name = REPO.split("/")
    payload["repository"].update(full_name=REPO, name=name)
    payload["repository"]["owner"]["login"] = owner
    pull = payload["pull_request"]
    pull.update(number=number, labels=[{"name": "agent-fix"}], author_association="OWNER")
    pull["head"].update(ref=BRANCH, sha=head_sha, label=f"{owner}:{BRANCH}")
    pull["head"]["repo"]["full_name"] = pull["base"]["repo"]["full_name"] = REPO
    if "number" in payload:
        payload["number"] = number
    return payload


def example(name: str) -> dict[str, Any]:
    return json.loads((GITHUB_FIXTURES / name).read_text())


def pr_delivery(action: str, number: int, head_sha: str, sender: str) -> bytes:
    payload = on_our_pull(example(f"pull_request/{action}.payload.json"), number, head_sha)
    payload["sender"]["login"] = sender
    if action == "labeled":
        payload["label"]["name"] = "agent-fix"
    else:
        payload["after"] = head_sha
    return json.dumps(payload).encode()


def review_comment_delivery(number: int, head_sha: str, path: str) -> bytes:
    payload = example("pull_request_review_comment/created.payload.json")
    payload = on_our_pull(payload, number, head_sha)
    payload["comment"].update(body=QUESTION, path=path, author_association="OWNER")
    payload["comment"]["user"]["login"] = payload["sender"]["login"] = HUMAN
    return json.dumps(payload).encode()


# --- what the test reads back ---------------------------------------------------------------


def runs(cluster: Cluster) -> list[RunRow]:
    with cluster.session_factory() as session:
        return list(session.scalars(select(RunRow).order_by(RunRow.id)))


def new_run(cluster: Cluster, rule: str, known: set[str]) -> str:
    """The id of the one run of `rule` not in `known` (waited for)."""
    fresh = wait_until(
        lambda: [r.id for r in runs(cluster) if r.rule_id == rule and r.id not in known],
        30,
        f"a new run of {rule}",
    )
    assert len(fresh) == 1, fresh
    known.add(fresh[0])
    return fresh[0]


def lane_of(cluster: Cluster, run_id: str) -> LaneRow:
    with cluster.session_factory() as session:
        (lane,) = [lane for lane in lanes_db.list_lanes(session, None) if lane.run_id == run_id]
        return lane


def agent_events(cluster: Cluster, run_id: str) -> list[tuple[str, dict[str, Any]]]:
    with cluster.session_factory() as session:
        return run_events_db.events_of(session, run_id, "agent.")


def tool_results(loop: Loop, run_id: str) -> dict[str, dict[str, Any]]:
    """The run's tool results by tool name (the last of each; the GitHub tools without the
    agent's prefix), as `ok` and `content`: the HTTP loop's results name their tool, a CLI's
    name the id of the call that asked for it."""
    names: dict[str, str] = {}
    found: dict[str, dict[str, Any]] = {}
    for kind, data in agent_events(loop.cluster, run_id):
        if kind == "agent.tool_call":
            names[str(data["id"])] = str(data["name"])
        elif kind == "agent.tool_result":
            name = data.get("tool") or names[str(data["id"])]
            content = data["content"] if "content" in data else data["output"]
            found[name.removeprefix(loop.agent.github_prefix)] = {
                "ok": not data["is_error"],
                "content": content,
            }
    return found


def processes_below(worker: Child) -> tuple[dict[int, list[str]], dict[int, int]]:
    """The live processes below the worker's (its pool's and theirs): argv and parent by pid."""
    parents: dict[int, int] = {}
    argvs: dict[int, list[str]] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            state, parent = (entry / "stat").read_text().rsplit(")", 1)[1].split()[:2]
            argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue  # gone meanwhile
        if state != "Z":  # a zombie has ended, only its parent has not reaped it yet
            parents[int(entry.name)], argvs[int(entry.name)] = int(parent), argv
    below, frontier = set(), {worker.pid}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier} - below
        below |= frontier
    return {pid: argvs[pid] for pid in below}, parents


def cli_processes(worker: Child, cli: str | None) -> dict[int, str]:
    """The agent CLI's processes below the worker (`cli` and everything it started: its MCP
    bridge, the tools it runs), by pid with their command line; none for an HTTP provider."""
    argvs, parents = processes_below(worker)
    tree = {pid for pid, argv in argvs.items() if cli and Path(argv[0]).name.startswith(cli)}
    frontier = set(tree)
    while frontier:
        frontier = {pid for pid in argvs if parents[pid] in frontier} - tree
        tree |= frontier
    return {pid: " ".join(argvs[pid]).strip() for pid in tree}


def session_sandboxes(worker: Child) -> list[int]:
    """Agent CLI sandboxes below the worker: the ones whose model proxy is forwarded in."""
    argvs, _ = processes_below(worker)
    return [pid for pid, argv in argvs.items() if any(a.endswith("/forward.py") for a in argv)]


def dispatched(cluster: Cluster, count: int) -> None:
    wait_until(
        lambda: (
            len(found := events(cluster)) == count and all(e.status == "dispatched" for e in found)
        ),
        30,
        f"{count} deliveries to be dispatched",
    )


@dataclass
class Loop:
    """One cluster serving the recipe: the API, a worker, the scripted GitHub and model."""

    cluster: Cluster
    api: httpx.Client
    worker: Child
    github: FakeGithub
    model: ScriptedAnthropic
    agent: Agent
    number: int
    head: str

    def deliver(self, event: str, body: bytes, delivery: str) -> httpx.Response:
        return deliver(self.api, event, body, delivery=delivery)


@pytest.fixture(params=AGENTS, ids=lambda agent: agent.provider)
def loop(request: pytest.FixtureRequest, cluster: Cluster, project: Path) -> Iterator[Loop]:
    agent: Agent = request.param
    binary = real_cli(agent.cli) if agent.cli else None  # skips (fails under CI) without it
    with (
        FakeGithub(token=TOKEN, root=cluster.tmp, repos=[REPO], public=True) as github,
        ScriptedAnthropic() as model,
    ):
        head = seed_repository(github, project, cluster.tmp)
        title, created = "Greet with an exclamation mark", "2024-01-01T00:00:00Z"
        pull = github.seed_pull(REPO, title, created_at=created, head=BRANCH, user=HUMAN)
        for name, document in recipe_rules(agent).items():
            (cluster.tmp / "rules").mkdir(exist_ok=True)
            (cluster.tmp / "rules" / name).write_text(yaml.safe_dump(document))
        cluster.sync_rules(cluster.tmp / "rules")
        provider = f"ADE_PROVIDERS__{agent.provider.upper().replace('-', '_')}"
        env = {
            "ADE_GITHUB__WEBHOOK_SECRET": SECRET,
            "ADE_GITHUB__API_URL": github.url,
            "ADE_GITHUB__GIT_URL": github.git_url,
            "ADE_GITHUB__TOKEN": TOKEN,
            "ADE_GITHUB__BOT_LOGINS": json.dumps([BOT]),
            f"{provider}__BASE_URL": model.url,
            f"{provider}__API_KEY": "sk-ant-t",
        }
        if binary is not None:
            env[f"{provider}__BINARY"] = str(binary)
        api = cluster.api(env=env)
        worker = cluster.worker(queues="ade.builtin,ade.agent,ade.control", concurrency=3, env=env)
        yield Loop(cluster, api, worker, github, model, agent, pull["number"], head)
        api.close()


def test_label_fix_push_answer_review_supersede_and_nothing_posted_twice(loop: Loop) -> None:
    cluster, github, model, agent, number = (
        loop.cluster, loop.github, loop.model, loop.agent, loop.number
    )  # fmt: skip
    known: set[str] = set()
    github.add_check(REPO, loop.head, "tests", "failure", log=FAILURE, failed_steps=("Run tests",))

    # 1-2. A label starts one pr-fixer run in a lane on the PR's head: the agent reads the failing
    # check, fixes the code, the tests pass, the fix is pushed to the PR's branch and commented.
    model.script(
        agent.github("github_checks"),
        *agent.rewrite("greeting.py", FIXED),
        agent.shell("python3 -m unittest -q"),
        agent.github("github_push", commit_message="Greet with an exclamation mark"),
        agent.github("github_comment", body="greet() now ends with '!', as the test expects."),
        Turn.text("Fixed greet(); the tests pass and the fix is pushed."),
    )
    labeled = pr_delivery("labeled", number, loop.head, HUMAN)
    assert loop.deliver("pull_request", labeled, "label").status_code == 202
    fix = new_run(cluster, "pr-fixer", known)
    assert finished(cluster, fix, 60).status == "succeeded", run_row(cluster, fix).error
    results = tool_results(loop, fix)
    assert "AssertionError: 'Hello, Ada' != 'Hello, Ada!'" in results["github_checks"]["content"]
    ran = results[agent.shell_tool]
    assert ran["ok"] and "OK" in ran["content"], results
    pushed = github.head_of(REPO, BRANCH)
    assert pushed != loop.head and results["github_push"]["ok"]
    bare = github.git_repo(REPO)
    assert _git(bare, "show", f"{pushed}:greeting.py") + "\n" == FIXED
    assert _git(bare, "rev-parse", f"{pushed}^") == loop.head  # a fast-forward, never forced
    assert _git(bare, "diff", "--name-only", loop.head, pushed) == "greeting.py"
    lane = lane_of(cluster, fix)
    assert lane.base_ref == f"origin/{BRANCH}" and lane.base_sha == loop.head

    # 3. The agent's own push (sent by the engine's login) starts nothing, and the API says
    # which filter of pr-fixer refused it and why.
    own = pr_delivery("synchronize", number, pushed, BOT)
    assert loop.deliver("pull_request", own, "own-push").status_code == 202
    dispatched(cluster, 2)
    own_event = next(e for e in events(cluster) if e.delivery_id == "own-push")
    assert own_event.runs == []
    shown = loop.api.get(f"/api/v1/ingress/events/{own_event.id}")
    assert shown.status_code == 200, shown.text
    verdicts = {v["rule"]: v for v in shown.json()["matching"]["rules"]}
    refused = verdicts["pr-fixer"]
    assert (refused["verdict"], refused["filter"]) == ("refused", "include_own"), refused
    assert f"sender {BOT} is the engine's own GitHub identity" in refused["reason"], refused
    assert not any(v["verdict"] == "matched" for v in verdicts.values()), verdicts

    # 4. A review comment starts pr-review-answer, whose session continues the fix's thread,
    # answers in the review thread and resolves it.
    thread = github.add_thread(REPO, number, QUESTION, path="greeting.py", line=2, author=HUMAN)
    model.script(
        agent.github("github_threads"),
        agent.github("github_reply", thread_id=thread, body="Yes: the test asks for it."),
        agent.github("github_resolve", thread_id=thread),
        Turn.text("Answered the review and resolved the thread."),
    )
    asked = len(model.conversation)
    comment = review_comment_delivery(number, pushed, "greeting.py")
    assert loop.deliver("pull_request_review_comment", comment, "review").status_code == 202
    answer = new_run(cluster, "pr-review-answer", known)
    assert finished(cluster, answer, 60).status == "succeeded", run_row(cluster, answer).error
    given = json.dumps(model.conversation[asked].body["messages"])
    assert "has failing checks" in given and "Fixed greet()" in given  # the fix's conversation
    assert given.index("Fixed greet()") < given.index(QUESTION)
    assert github.threads[thread]["isResolved"] is True

    # 5. A person pushes while a fix of the PR works: the next push supersedes that run while
    # its model call is held (an HTTP session keeps the turn in flight and runs none of its
    # tools; a CLI and all it started are killed at once), its lane stays, the new run runs.
    hold = threading.Event()
    model.script(
        dataclasses.replace(agent.github("github_checks"), gate=hold),
        agent.github("github_checks"),
        Turn.text("The new head has no failing checks; nothing to fix."),
    )
    before = len(model.conversation)
    first = human_push(github, cluster.tmp, "a note\n")
    sync = pr_delivery("synchronize", number, first, HUMAN)
    assert loop.deliver("pull_request", sync, "human-push-1").status_code == 202
    working = new_run(cluster, "pr-fixer", known)
    wait_until(lambda: len(model.conversation) > before, 30, "the working run's model call")
    session = cli_processes(loop.worker, agent.cli)  # waiting for the held reply
    assert bool(session) == bool(agent.cli), session
    second = human_push(github, cluster.tmp, "another note\n")
    sync = pr_delivery("synchronize", number, second, HUMAN)
    assert loop.deliver("pull_request", sync, "human-push-2").status_code == 202
    newer = new_run(cluster, "pr-fixer", known)
    wait_until(lambda: run_row(cluster, working).status == "cancelled", 30, "the supersede")
    # The superseded CLI's whole tree ends while its model call is still held.
    wait_until(lambda: not set(session) & set(cli_processes(loop.worker, agent.cli)), 30, "end")
    hold.set()
    assert finished(cluster, newer, 60).status == "succeeded", run_row(cluster, newer).error
    assert run_row(cluster, working).error == f"superseded by run {newer}"
    assert (
        f"on {second[:12]} (PR #{number})" in tool_results(loop, newer)["github_checks"]["content"]
    )
    ended = "agent.cli_result" if agent.cli else "agent.model_turn"
    kept = wait_until(
        lambda: (
            (found := agent_events(cluster, working))
            and any(k == ended for k, _ in found)
            and found
        ),
        30,
        "the superseded session's end to be recorded",
    )
    if agent.cli:  # killed before the held reply reached it: its result says cancelled
        (result,) = [data for kind, data in kept if kind == ended]
        assert result["cancelled"] is True, result
    else:  # the turn in flight is kept
        assert [k for k, _ in kept if k.startswith("agent.model_turn")] == ["agent.model_turn"]
    assert not any(kind == "agent.tool_result" for kind, _ in kept)  # the turn's tool never ran
    assert lane_of(cluster, working).status == "active" and lane_of(cluster, working).path
    # Each CLI session's sandbox ended with it (none is kept idle for a command that never
    # comes: it bound the session's own directories).
    wait_until(lambda: not session_sandboxes(loop.worker), 10, "no session sandbox left")

    # 6. Redeliveries start nothing, and nothing was posted twice.
    again = [
        loop.deliver("pull_request", labeled, "label"),
        loop.deliver("pull_request_review_comment", comment, "review"),
    ]
    assert [a.status_code for a in again] == [200, 200]
    dispatched(cluster, 5)
    assert sorted(r.rule_id for r in runs(cluster)) == ["pr-fixer"] * 3 + ["pr-review-answer"]
    calls = github.calls
    posted = {
        "comment": [c for c in calls if c.method == "POST" and c.path.endswith("/comments")],
        "push": [c for c in calls if c.path.endswith("/git-receive-pack")],
        "reply": [c for c in calls if "addPullRequestReviewThreadReply" in json.dumps(c.json)],
        "resolve": [c for c in calls if "resolveReviewThread" in json.dumps(c.json)],
    }
    assert {what: len(found) for what, found in posted.items()} == dict.fromkeys(posted, 1)
    (posted_comment,) = github.comment_bodies(REPO, number)
    assert f"<!-- ade:run={fix} call=" in posted_comment  # what a resumed run looks for first
    assert len(github.threads[thread]["comments"]) == 2
    assert TOKEN not in json.dumps([s.body for s in model.requests])
