"""Rules from git with a token, through the real `ade-tasks api` process on PostgreSQL and the
`ade-tasks rules push` command: a dry run's diff, one versioned change, a directory with a bad
file refused whole with every problem, two concurrent pushes (one applied, the other told to
run again), and an operator's push refused."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import select

from ade_tasks.access.roles import Role
from ade_tasks.db import tokens as tokens_db
from ade_tasks.db.schema import RuleRow, RuleVersionRow
from tests.conftest import write_rule
from tests.integration.conftest import Cluster, api_with_hello_rule
from tests.integration.test_cli_cluster import cli

PUSH = "/api/v1/rules/push"


def rule(rule_id: str, command: str = "echo hi") -> str:
    return (
        f"id: {rule_id}\ntriggers: [{{type: manual}}]\n"
        f"execution: {{kind: built-in, actions: [{{type: run-command, command: '{command}'}}]}}\n"
    )


def rules_in_db(cluster: Cluster) -> dict[str, tuple[int, str, str | None]]:
    with cluster.session_factory() as session:
        rows = session.execute(select(RuleRow.id, RuleRow.version, RuleRow.source_file))
        return {rule_id: (version, command_of(cluster, rule_id), f) for rule_id, version, f in rows}


def command_of(cluster: Cluster, rule_id: str) -> str:
    with cluster.session_factory() as session:
        document: dict[str, Any] = session.scalars(
            select(RuleRow.document).where(RuleRow.id == rule_id)
        ).one()
    return str(document["execution"]["actions"][0]["command"])


def checkout(cluster: Cluster) -> Path:
    """A team's git checkout: `config/rules` holds `hello` (changed) and a new rule."""
    rules = cluster.tmp / "checkout" / "config" / "rules"
    write_rule(rules, "hello.yaml", rule("hello", "echo pushed"))
    write_rule(rules / "team", "nightly.yaml", rule("nightly"))
    return rules


def test_a_dry_run_prints_the_diff_and_a_push_applies_it_as_one_versioned_change(
    cluster: Cluster,
) -> None:
    # Given a cluster whose `hello` rule was synced from its rules directory
    api = api_with_hello_rule(cluster)
    url = str(api.base_url)
    rules = checkout(cluster)
    before = rules_in_db(cluster)
    # When the checkout is pushed as a dry run
    dry = cli(cluster, "rules", "push", str(rules), "--dry-run", "--url", url)
    # Then the diff is printed and nothing changes
    assert dry.returncode == 0, dry.stderr
    assert "+ added    nightly" in dry.stdout
    assert "~ updated  hello" in dry.stdout
    assert "-    command: echo hi\n+    command: echo pushed" in dry.stdout
    assert "dry run (1 added, 1 updated, 0 removed); nothing was applied" in dry.stdout
    assert rules_in_db(cluster) == before
    # When it is pushed
    pushed = cli(cluster, "rules", "push", str(rules), "--url", url, "--by", "ci")
    # Then the file rules match the checkout, each change a version by the token's name
    assert pushed.returncode == 0, pushed.stderr
    assert "1 added, 1 updated, 0 removed, 0 unchanged" in pushed.stdout
    assert rules_in_db(cluster) == {
        "hello": (2, "echo pushed", f"{rules}/hello.yaml"),
        "nightly": (1, "echo hi", f"{rules}/team/nightly.yaml"),
    }
    with cluster.session_factory() as session:
        by = session.scalars(
            select(RuleVersionRow.changed_by).where(RuleVersionRow.rule_id == "hello")
        ).all()
    assert sorted(by) == ["rules sync", "tests (ci)"]
    # And a push of the same checkout again changes nothing
    again = cli(cluster, "rules", "push", str(rules), "--url", url)
    assert again.returncode == 0 and "nothing to push" in again.stdout


def test_a_directory_with_bad_files_is_refused_whole_with_every_problem(cluster: Cluster) -> None:
    # Given a checkout with two good files and two bad ones
    api = api_with_hello_rule(cluster)
    rules = checkout(cluster)
    write_rule(rules, "typo.yaml", rule("typo").replace("run-command", "run-comand"))
    write_rule(rules, "zz-broken.yaml", "id: [unclosed\n")
    before = rules_in_db(cluster)
    # When it is pushed
    refused = cli(cluster, "rules", "push", str(rules), "--url", str(api.base_url))
    # Then nothing is applied and every problem is listed with its file and field
    assert refused.returncode == 1
    assert rules_in_db(cluster) == before
    assert f"{rules}/typo.yaml:execution.actions.0:" in refused.stderr
    assert f"{rules}/zz-broken.yaml:line 2, column 1: malformed YAML" in refused.stderr
    assert "2 problems in the pushed rules; nothing was applied" in refused.stderr


def test_of_two_concurrent_pushes_one_is_applied_and_the_other_told_to_run_again(
    cluster: Cluster,
) -> None:
    # Given two CI jobs that compared their checkouts with the same state (their dry runs)
    api = api_with_hello_rule(cluster)
    bodies = [
        {"directory": "config/rules", "files": [{"path": "hello.yaml", "text": rule("hello", c)}]}
        for c in ("echo one", "echo two")
    ]
    base = api.post(PUSH, json={**bodies[0], "dry_run": True}).json()["base"]
    # When both push at once
    barrier = threading.Barrier(2)
    answers: list[httpx.Response] = []

    def push(body: dict[str, Any]) -> None:
        with httpx.Client(base_url=api.base_url, headers=api.headers, timeout=30) as client:
            barrier.wait()
            answers.append(client.post(PUSH, json={**body, "base": base}))

    threads = [threading.Thread(target=push, args=(body,)) for body in bodies]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    # Then one is applied and the other is refused with 409, saying to run it again
    assert sorted(a.status_code for a in answers) == [200, 409], [a.text for a in answers]
    won = next(a for a in answers if a.status_code == 200).json()
    lost = next(a for a in answers if a.status_code == 409).json()
    assert f"changed since revision {base} (now {won['revision']})" in lost["detail"]
    assert "Run `ade-tasks rules push` again" in lost["detail"]
    version, command, _ = rules_in_db(cluster)["hello"]
    assert version == 2 and command in ("echo one", "echo two")  # one change, not two


def test_an_operator_may_not_push(cluster: Cluster) -> None:
    api = api_with_hello_rule(cluster)
    with cluster.session_factory.begin() as session:
        _, secret = tokens_db.create_token(session, "on-call", Role.OPERATOR, "tests")
    rules = checkout(cluster)
    env = {**cluster.env, "ADE_API_TOKEN": secret}
    refused = cli(cluster, "rules", "push", str(rules), "--url", str(api.base_url), env=env)
    assert refused.returncode == 1
    assert "answered 403" in refused.stderr
    assert "needs the admin role; token 'on-call' has operator" in refused.stderr
    assert rules_in_db(cluster)["hello"][:2] == (1, "echo hi")
