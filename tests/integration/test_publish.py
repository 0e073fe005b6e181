"""Publishing dispositions through the real runner against scripted GitHub and webhook servers
on 127.0.0.1 (SQLite, real git and subprocesses; no broker needed)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import SecretStr
from sqlalchemy import update

from ade_tasks.db import runs as runs_db
from ade_tasks.db.engine import SessionFactory
from ade_tasks.db.schema import RunRow
from ade_tasks.runs.dispatch import dispatch
from ade_tasks.runs.trigger_events import TriggerEvent
from ade_tasks.states import RunStatus
from ade_tasks.testing import InMemorySender
from ade_workers.engine.runner import execute_run
from ade_workers.engine.runner_config import RunnerConfig
from tests.fake_http import ScriptedServer
from tests.git_project import git, make_git_project, make_runner_config, migrated_sqlite
from tests.unit.conftest import add_rule

REPO = "acme/widgets"
TOKEN = "ghp_publish_token"


@pytest.fixture
def session_factory(tmp_path: Path) -> SessionFactory:
    return migrated_sqlite(tmp_path)


@pytest.fixture
def rules_dir(tmp_path: Path) -> Path:
    return tmp_path / "rules"


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return make_git_project(tmp_path, monkeypatch)


@pytest.fixture
def config(project: Path, tmp_path: Path) -> RunnerConfig:
    return make_runner_config(project, tmp_path)


@pytest.fixture
def github() -> Iterator[ScriptedServer]:
    with ScriptedServer(repos=[REPO], token=TOKEN) as server:
        yield server


def with_github(config: RunnerConfig, server: ScriptedServer, **env: str) -> RunnerConfig:
    settings = config.settings.model_copy(
        update={"github": config.settings.github.model_copy(
            update={"api_url": server.url, "token": SecretStr(TOKEN)}
        )}
    )  # fmt: skip
    return RunnerConfig(settings, config.executors, {**config.base_env, **env})


def pr_event(number: int = 7) -> TriggerEvent:
    payload = {"repo": REPO, "number": number, "title": "Add widgets", "branch": "feature"}
    return TriggerEvent("github.pr_opened", f"PR #{number}", payload, f"delivery-{number}")


def run_once(session_factory: SessionFactory, config: RunnerConfig, run_id: str) -> RunRow:
    execute_run(session_factory, config, run_id, "w1")
    with session_factory() as session:
        run = runs_db.get_run(session, run_id)
        session.expunge(run)
    return run


COMMENT_RULE = """
id: review
triggers: [{type: github.pr_opened, repo: acme/widgets}]
outputs: {disposition: comment-only, retry: 2}
execution:
  kind: built-in
  actions: [{id: check, type: run-command, command: "echo checked PR {{trigger.number}}"}]
"""


def test_comment_only_retries_github_errors_and_a_retried_run_updates_its_comment(
    session_factory: SessionFactory,
    rules_dir: Path,
    config: RunnerConfig,
    github: ScriptedServer,
) -> None:
    add_rule(session_factory, rules_dir, "review", COMMENT_RULE)
    configured = with_github(config, github)
    run_id = dispatch(session_factory, InMemorySender(), "review", pr_event()).run.id
    github.fail_next(500, method="GET")
    github.fail_next(403, headers={"Retry-After": "1"}, message="rate limited", method="POST")

    first = run_once(session_factory, configured, run_id)
    with session_factory.begin() as session:  # the same run executed again (a redelivery)
        session.execute(update(RunRow).where(RunRow.id == run_id).values(status=RunStatus.QUEUED))
    second = run_once(session_factory, configured, run_id)

    (body,) = github.comment_bodies(REPO, 7)
    assert first.status == second.status == RunStatus.SUCCEEDED
    assert f"run `{run_id}`: **succeeded**" in body
    assert f"<!-- ade:run={run_id} step=publish -->" in body
    assert len(github.requests_to("POST", f"/repos/{REPO}/issues/7/comments")) == 2  # 403, then 201
    assert len(github.requests_to("PATCH", f"/repos/{REPO}/issues/comments/")) == 1


def test_comment_only_gives_up_after_its_retries_with_a_clear_error(
    session_factory: SessionFactory,
    rules_dir: Path,
    config: RunnerConfig,
    github: ScriptedServer,
) -> None:
    add_rule(session_factory, rules_dir, "review", COMMENT_RULE)
    run_id = dispatch(session_factory, InMemorySender(), "review", pr_event()).run.id
    github.fail_next(502, times=10)

    run = run_once(session_factory, with_github(config, github), run_id)

    assert run.status == RunStatus.FAILED
    assert run.error is not None and "publish" in run.error and "3 attempts" in run.error
    assert TOKEN not in run.error
    assert github.comment_bodies(REPO, 7) == []


def test_notify_posts_to_the_webhook_from_a_secret_and_masks_its_url(
    session_factory: SessionFactory, rules_dir: Path, config: RunnerConfig
) -> None:
    with ScriptedServer("webhook") as hook:
        add_rule(session_factory, rules_dir, "ping", """
id: ping
triggers: [{type: manual}]
outputs: {disposition: notify, notify_url: "${env:SLACK_WEBHOOK_URL}"}
execution: {kind: built-in, actions: [{id: a, type: run-command, command: "echo done"}]}
""")  # fmt: skip
        configured = RunnerConfig(
            config.settings,
            config.executors,
            {**config.base_env, "SLACK_WEBHOOK_URL": f"{hook.url}/hooks/T000/B000/XXXX"},
        )
        run_id = dispatch(session_factory, InMemorySender(), "ping", TriggerEvent.manual()).run.id

        run = run_once(session_factory, configured, run_id)

        (posted,) = hook.requests
    assert run.status == RunStatus.SUCCEEDED
    assert posted.path == "/hooks/T000/B000/XXXX"
    assert f"run `{run_id}`: **succeeded**" in posted.json["text"]
    assert f"(ade run={run_id} step=publish)" in posted.json["text"]


def test_open_pr_pushes_the_lane_branch_and_opens_one_draft_pr(
    session_factory: SessionFactory,
    rules_dir: Path,
    config: RunnerConfig,
    github: ScriptedServer,
    project: Path,
    tmp_path: Path,
) -> None:
    remote = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    git(project, "remote", "add", "origin", str(remote))
    add_rule(session_factory, rules_dir, "fixer", """
id: fixer
triggers: [{type: manual}]
outputs: {disposition: open-pr, repo: acme/widgets, pr_base: main, pr_title: "Fix by {{rule.id}}"}
execution:
  kind: built-in
  actions:
    - {id: lane, type: create-lane, name: autofix, base: main}
    - {id: edit, type: run-command, command: "echo fixed >> src/app.py"}
""")  # fmt: skip
    run_id = dispatch(session_factory, InMemorySender(), "fixer", TriggerEvent.manual()).run.id

    run = run_once(session_factory, with_github(config, github), run_id)

    (pull,) = github.open_pulls(REPO)
    assert run.status == RunStatus.SUCCEEDED, run.error
    assert (pull["head"]["ref"], pull["base"]["ref"], pull["draft"]) == (
        "ade/autofix",
        "main",
        True,
    )
    assert pull["title"] == "Fix by fixer"
    pushed = git(remote, "show", "ade/autofix:src/app.py")
    assert pushed == "print('hi')\nfixed\n"
