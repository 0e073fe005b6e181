"""Each deploy migrates the database and syncs the rules in one step of its own, never before
each API process.
"""

from __future__ import annotations

from tests.unit.deploy.deploy_files import DEPLOY, all_commands, compose, k8s_docs, systemd_unit

MIGRATING = (["db", "upgrade"], ["rules", "sync"])


def test_one_migration_step_per_deploy() -> None:
    """Issue 37, finding 11: `db upgrade` and `rules sync` run in one step per deploy (a systemd
    oneshot unit, a Kubernetes Job, a Compose one-shot service the others wait for), never
    before each API process, so several API hosts never migrate or sync at the same time."""
    migrating = [c for c in all_commands() if c.program == "ade-tasks" and c.argv[1:3] in MIGRATING]
    kinds = {c.source.split(" ")[0].split("/")[0] for c in migrating}
    assert kinds == {"docker-compose.yml", "k8s", "systemd"}, kinds
    jobs = {doc["metadata"]["name"] for _, doc in k8s_docs() if doc["kind"] == "Job"}
    services = compose()["services"]
    for command in migrating:
        where, _, part = command.source.partition(" ")
        if where.startswith("systemd/"):
            service = systemd_unit(DEPLOY / where)["Service"]
            assert ("Type", "oneshot") in service and part == "ExecStart", (
                f"{command.source}: migrate in a Type=oneshot unit's ExecStart, not before a "
                "long-running process"
            )
        elif where.startswith("k8s/"):
            assert part.split("/")[0] in jobs, f"{command.source}: migrate in a Job"
        else:
            name = part.removeprefix("service ")
            assert services[name].get("restart", "no") == "no", f"{command.source}: restarts"
            for other, service in services.items():
                if other != name and service.get("command", [""])[0] == "ade-tasks":
                    wait = (service.get("depends_on") or {}).get(name, {})
                    assert wait.get("condition") == "service_completed_successfully", (
                        f"compose service {other} does not wait for {name}"
                    )
    for command in all_commands():  # APIs that may run on several hosts leave the rules alone
        if command.argv[1:2] == ["api"] and command.source.startswith(("k8s", "systemd")):
            assert "--no-sync-rules" in command.argv, f"{command.source}: add --no-sync-rules"
