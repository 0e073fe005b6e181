"""`ade-action` GitHub and notify steps over loopback HTTP against a ScriptedServer, run through
`execute_run` on an SQLite database: what reached the server, and that a retried step never
posts twice.

No PostgreSQL, broker or worker process: these tests need only a socket on 127.0.0.1.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ade_tasks.db import rules as rules_db
from ade_tasks.db import run_steps as run_steps_db
from ade_tasks.db.engine import SessionFactory
from ade_tasks.rule_files.sync import sync_rules_dir
from ade_tasks.runs.dispatch import dispatch
from ade_tasks.runs.trigger_events import TriggerEvent
from ade_tasks.settings import Settings
from ade_tasks.states import RunStatus, StepStatus
from ade_tasks.testing import InMemorySender
from ade_workers.actions.ade_action import ade_action
from ade_workers.actions.executor import StepContext
from ade_workers.actions.registry import registry
from ade_workers.engine.chain import ChainState, prepare, template_context
from ade_workers.engine.runner import execute_run
from ade_workers.engine.runner_config import RunnerConfig
from tests.conftest import write_rule
from tests.fake_http import ScriptedServer
from tests.git_project import migrated_sqlite

REPO = "acme/widgets"
TOKEN = "t0ken"
HOOK_PATH = "/hooks/T000/B000/XXXX"


@pytest.fixture
def github() -> Iterator[ScriptedServer]:
    with ScriptedServer(repos=[REPO], token=TOKEN) as server:
        yield server


@pytest.fixture
def webhook() -> Iterator[ScriptedServer]:
    with ScriptedServer("webhook") as server:
        yield server


@pytest.fixture
def session_factory(tmp_path: Path) -> SessionFactory:
    return migrated_sqlite(tmp_path)


@pytest.fixture
def config(github: ScriptedServer, webhook: ScriptedServer, project: Path) -> RunnerConfig:
    settings = Settings(
        projects={"default": project},
        github={"api_url": github.url, "token": TOKEN},
        heartbeat_seconds=0.2,
    )
    env = {"PATH": os.environ["PATH"], "HOOK_URL": webhook.url + HOOK_PATH}
    return RunnerConfig(settings, registry(), env)


def run_rule(
    session_factory: SessionFactory, config: RunnerConfig, tmp_path: Path, steps: str
) -> tuple[str, RunStatus | None]:
    text = "id: r\ntriggers: [{type: manual}]\nexecution:\n  kind: built-in\n  actions:\n" + steps
    write_rule(tmp_path / "rules", "r.yaml", text)
    loaded, _ = sync_rules_dir(session_factory, tmp_path / "rules")
    assert not loaded.problems, loaded.problems
    run_id = dispatch(session_factory, InMemorySender(), "r", TriggerEvent.manual()).run.id
    return run_id, execute_run(session_factory, config, run_id, "w1")


def step_of(session_factory: SessionFactory, run_id: str, index: int = 0) -> Any:
    with session_factory() as session:
        step = run_steps_db.list_steps(session, run_id)[index]
        session.expunge(step)
    return step


def execute_again(
    session_factory: SessionFactory, config: RunnerConfig, run_id: str, index: int = 0
) -> StepStatus:
    """Execute step `index` of rule `r` once more for `run_id`, as a retried run would."""
    with session_factory() as session:
        rule = rules_db.rule_snapshot(session, "r").rule
    assert rule.execution.kind == "built-in"
    action = rule.execution.actions[index]
    # Resolved and rendered as the chain does before it calls an executor.
    template = template_context(rule, {}, ChainState())
    context = StepContext(
        run_id=run_id,
        rule=rule,
        trigger={},
        step_index=index,
        project_root=Path(),
        env_allowlist=(),
        base_env=config.base_env,
        time_left=lambda: 30.0,
        should_stop=lambda: False,
        step_id=action.id,
        sessions=session_factory,
        settings=config.settings,
        sender=None,
        template=template,
    )
    prepared, _ = prepare(action, template, config.base_env, f"step {action.id!r}")
    outcome = ade_action(prepared, context)
    assert outcome.error is None, outcome.error
    return outcome.status


def test_github_comment_posts_once_and_a_retried_step_updates_it(
    github: ScriptedServer, session_factory: SessionFactory, config: RunnerConfig, tmp_path: Path
) -> None:
    run_id, status = run_rule(session_factory, config, tmp_path, f"""\
    - {{id: say, type: ade-action, action: github.comment,
       args: {{repo: {REPO}, number: 7, body: "Nightly build passed"}}}}
""")  # fmt: skip

    assert status == RunStatus.SUCCEEDED
    marker = f"<!-- ade:run={run_id} step=say -->"
    assert github.comment_bodies(REPO, 7) == [f"Nightly build passed\n\n{marker}"]
    (post,) = github.requests_to("POST", f"/repos/{REPO}/issues/7/comments")
    assert post.headers["authorization"] == f"Bearer {TOKEN}"
    step = step_of(session_factory, run_id)
    assert step.result["created"] is True
    assert step.output == f"commented on {REPO}#7: {step.result['url']}"

    assert execute_again(session_factory, config, run_id) is StepStatus.SUCCEEDED

    assert len(github.comment_bodies(REPO, 7)) == 1
    assert len(github.requests_to("POST", f"/repos/{REPO}/issues/7/comments")) == 1
    assert len(github.requests_to("PATCH", f"/repos/{REPO}/issues/comments/")) == 1


def test_github_add_labels_adds_each_label_once(
    github: ScriptedServer, session_factory: SessionFactory, config: RunnerConfig, tmp_path: Path
) -> None:
    run_id, status = run_rule(session_factory, config, tmp_path, f"""\
    - {{id: label, type: ade-action, action: github.add_labels,
       args: {{repo: {REPO}, number: 3, labels: [needs-review, ade, ade]}}}}
""")  # fmt: skip

    assert status == RunStatus.SUCCEEDED
    (post,) = github.requests_to("POST", f"/repos/{REPO}/issues/3/labels")
    assert post.json == {"labels": ["needs-review", "ade"]}
    assert step_of(session_factory, run_id).result["labels"] == ["needs-review", "ade"]

    assert execute_again(session_factory, config, run_id) is StepStatus.SUCCEEDED
    assert github.labels[(REPO, 3)] == ["needs-review", "ade"]


def test_github_refusal_fails_the_step_with_githubs_reason(
    github: ScriptedServer, session_factory: SessionFactory, config: RunnerConfig, tmp_path: Path
) -> None:
    run_id, status = run_rule(session_factory, config, tmp_path, """\
    - {id: say, type: ade-action, action: github.comment,
       args: {repo: acme/unknown, number: 7, body: hi}}
""")  # fmt: skip

    assert status == RunStatus.FAILED
    error = step_of(session_factory, run_id).error
    assert error.startswith(
        "step 'say': ade-action 'github.comment': GET /repos/acme/unknown/issues/7/comments "
        "answered 404 (Not Found)"
    )
    assert TOKEN not in error


def test_notify_send_posts_once_with_the_marker_and_never_shows_the_url(
    webhook: ScriptedServer, session_factory: SessionFactory, config: RunnerConfig, tmp_path: Path
) -> None:
    run_id, status = run_rule(session_factory, config, tmp_path, """\
    - {id: ping, type: ade-action, action: notify.send,
       args: {url: "${env:HOOK_URL}", text: "Deploy finished"}}
""")  # fmt: skip

    assert status == RunStatus.SUCCEEDED
    (post,) = webhook.requests_to("POST", HOOK_PATH)
    assert post.json == {"text": f"Deploy finished\n(ade run={run_id} step=ping)"}
    step = step_of(session_factory, run_id)
    assert step.result == {"sent": True}
    assert HOOK_PATH not in step.output

    assert execute_again(session_factory, config, run_id) is StepStatus.SUCCEEDED
    assert len(webhook.requests_to("POST", HOOK_PATH)) == 1
