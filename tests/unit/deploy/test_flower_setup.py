"""Flower as the deploy files run it: behind auth read from its environment (the password in no
command line), reachable from loopback only, and seeing runs without `-E`.
"""

from __future__ import annotations

from typing import Any

from ade_tasks.settings import Settings
from ade_workers.celery.app import create_celery_app
from tests.unit.deploy.command_lines import celery_invocation, flower_option_values
from tests.unit.deploy.deploy_files import (
    DEPLOY,
    Command,
    _deployments,
    all_commands,
    compose,
    env_file,
    k8s_docs,
)


def flower_commands() -> list[Command]:
    return [
        c
        for c in all_commands()
        if c.program == "celery" and celery_invocation(c.argv)[1] == "flower"
    ]


def test_flower_always_starts_with_auth_from_its_environment() -> None:
    """Flower reads FLOWER_BASIC_AUTH itself (`flower.command.apply_env_options`), so the
    password is in no command line; each kind of file makes the variable required."""
    flowers = flower_commands()
    kinds = {c.source.split(" ")[0].split("/")[0] for c in flowers}
    assert kinds == {"docker-compose.yml", "k8s", "systemd"}, kinds
    for command in flowers:
        options = flower_option_values(celery_invocation(command.argv)[2])
        assert not {"basic_auth", "oauth2_secret", "cookie_secret"} & set(options), (
            f"{command.source}: Flower's credentials on its command line: {sorted(options)}"
        )
        if command.source.startswith("docker-compose"):
            value = command.context.get("FLOWER_BASIC_AUTH") or ""
            assert "${FLOWER_BASIC_AUTH:?" in value, (
                f"{command.source}: set FLOWER_BASIC_AUTH: ${{FLOWER_BASIC_AUTH:?...}} in its "
                "environment, so Compose refuses to start without it"
            )
        elif command.source.startswith("k8s"):
            ref = command.context.get("FLOWER_BASIC_AUTH")
            assert isinstance(ref, dict) and "secretKeyRef" in ref, command.source
            assert not ref["secretKeyRef"].get("optional"), f"{command.source}: optional secret"
        else:
            assert command.context.get("env_files"), f"{command.source}: no EnvironmentFile"
            pre = " ".join(command.context.get("pre", []))
            assert "FLOWER_BASIC_AUTH" in pre, (
                f"{command.source}: no ExecStartPre refusing an empty FLOWER_BASIC_AUTH"
            )
    example = env_file(DEPLOY / "systemd" / "ade.env.example")
    assert "FLOWER_BASIC_AUTH" in example


def _networks(service: dict[str, Any]) -> set[str]:
    return set(service.get("networks") or ["default"])  # a list, or a mapping by name


def test_flower_is_reachable_from_loopback_only() -> None:
    """Flower exempts /metrics and /healthcheck from its auth (`flower.views.monitor`: no
    `@web.authenticated`), so no deploy lets anything but the host's loopback reach it."""
    for command in flower_commands():
        options = flower_option_values(celery_invocation(command.argv)[2])
        address = options.get("address", command.context.get("FLOWER_ADDRESS", ""))
        if command.source.startswith("docker-compose"):
            continue  # a container's loopback is unreachable through its published port
        assert address == "127.0.0.1", f"{command.source}: Flower listens on {address!r}"
    services = compose()["services"]
    flower = services["flower"]
    ports = [str(p) for p in flower.get("ports", [])]
    assert ports and all(p.startswith("127.0.0.1:") for p in ports), ports
    # On a network of its own with the broker it reads: no API, worker or beat reaches it.
    for name, service in services.items():
        if name not in ("flower", "redis"):
            shared = _networks(service) & _networks(flower)
            assert not shared, f"compose service {name} reaches Flower on {shared}"
    deployment = _deployments()["ade-flower"]
    labels = deployment["spec"]["template"]["metadata"]["labels"].items()
    for _, doc in k8s_docs():
        if doc["kind"] == "Service":
            assert not doc["spec"]["selector"].items() <= labels, (
                f"Service {doc['metadata']['name']} exposes Flower beyond its pod's loopback"
            )


def test_workers_send_task_events_without_dash_e() -> None:
    # Flower sees runs because the app turns worker events on; the deploy files pass no -E.
    assert create_celery_app(Settings()).conf.worker_send_task_events is True
