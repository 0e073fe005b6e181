"""The shapes the deployment relies on: a non-root image and unprivileged units, exactly two
beats, the API's probes, Services that select their Deployments, workers covering every
queue (autoscaled on the queues they consume) and Secret keys the README creates.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from ade_api.http.routes.health import router as health_router
from ade_workers.celery.app import AGENT_QUEUE, DEFAULT_QUEUES
from tests.unit.deploy.command_lines import _is_beat, _worker_concurrency, _worker_queues
from tests.unit.deploy.deploy_files import (
    DEPLOY,
    ROOT,
    _deployments,
    _main_argv,
    compose,
    dockerfile_instructions,
    k8s_docs,
    pod_containers,
    systemd_unit,
)


def test_dockerfile_runs_as_a_non_root_user_and_copies_what_exists() -> None:
    instructions = dockerfile_instructions(DEPLOY / "Dockerfile")
    users = [rest for instruction, rest in instructions if instruction == "USER"]
    assert users, "the Dockerfile has no USER"
    user = users[-1].split(":")[0]
    assert user not in ("root", "0"), f"the image runs as {user}"
    last_from = max(i for i, (ins, _) in enumerate(instructions) if ins == "FROM")
    assert any(ins == "USER" for ins, _ in instructions[last_from:]), "USER before the final FROM"
    ignore = (DEPLOY / "Dockerfile.dockerignore").read_text().split()
    for instruction, rest in instructions:
        if instruction != "COPY" or "--from=" in rest:
            continue
        sources = [t for t in shlex.split(rest) if not t.startswith("--")][:-1]
        for source in sources:
            assert (ROOT / source).exists(), f"COPY {source}: not in the repository"
            if "**" in ignore:
                assert f"!{source}" in ignore, f"COPY {source} is excluded by the .dockerignore"


def test_compose_has_the_services_and_exactly_two_beats() -> None:
    services = compose()["services"]
    assert {"postgres", "redis", "api", "flower"} <= set(services)
    argvs = {name: [str(c) for c in s["command"]] for name, s in services.items() if "command" in s}
    beats = [name for name, argv in argvs.items() if _is_beat(argv)]
    assert len(beats) == 2, f"beats: {beats}"
    assert argvs["api"][:2] == ["ade-tasks", "api"]
    queues = {n: q for n, argv in argvs.items() if (q := _worker_queues(argv)) is not None}
    assert set(DEFAULT_QUEUES) <= {q for qs in queues.values() for q in qs}, queues
    agent = [n for n, q in queues.items() if AGENT_QUEUE in q]
    assert agent and all(_worker_concurrency(argvs[n]) <= 2 for n in agent)
    assert any(AGENT_QUEUE not in q for q in queues.values()), "no worker apart from the agent one"


def test_k8s_beat_has_two_replicas_and_api_has_the_probes() -> None:
    deployments = _deployments()
    beats = [d for d in deployments.values() if _is_beat(_main_argv(d))]
    assert len(beats) == 1 and beats[0]["spec"]["replicas"] == 2
    apis = [d for d in deployments.values() if _main_argv(d)[:2] == ["ade-tasks", "api"]]
    assert len(apis) == 1
    container = apis[0]["spec"]["template"]["spec"]["containers"][0]
    routes = {getattr(r, "path", None) for r in health_router.routes}
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        get = container[probe]["httpGet"]
        assert get["path"] == path and path in routes, f"{probe}: {get}"
        ports = {p.get("name"): p["containerPort"] for p in container["ports"]}
        assert get["port"] in ports or get["port"] in ports.values()


def test_k8s_services_select_their_deployments() -> None:
    deployments = _deployments()
    services = [doc for _, doc in k8s_docs() if doc["kind"] == "Service"]
    assert {s["metadata"]["name"] for s in services} >= {"ade-api"}
    for service in services:
        selector = service["spec"]["selector"]
        matches = [
            d
            for d in deployments.values()
            if selector.items() <= d["spec"]["template"]["metadata"]["labels"].items()
        ]
        assert len(matches) == 1, f"Service {service['metadata']['name']} selects {len(matches)}"


def test_k8s_workers_cover_the_queues_and_autoscaling_targets_them() -> None:
    deployments = _deployments()
    queues = {n: q for n, d in deployments.items() if (q := _worker_queues(_main_argv(d)))}
    assert set(DEFAULT_QUEUES) <= {q for qs in queues.values() for q in qs}, queues
    agent = [n for n, q in queues.items() if AGENT_QUEUE in q]
    assert agent and all(_worker_concurrency(_main_argv(deployments[n])) <= 2 for n in agent)
    scaled = [doc for _, doc in k8s_docs() if doc["kind"] == "ScaledObject"]
    assert scaled, "no queue-length autoscaling"
    for doc in scaled:
        target = doc["spec"]["scaleTargetRef"]["name"]
        assert target in queues, f"ScaledObject {doc['metadata']['name']} targets {target}"
        assert doc["spec"]["minReplicaCount"] >= 1  # ade.control must always be consumed
        for trigger in doc["spec"]["triggers"]:
            queue = trigger["metadata"].get("listName") or trigger["metadata"].get("queueName")
            assert queue in queues[target], f"{target} scales on {queue}, consumes {queues[target]}"


def _documented_secret_keys() -> set[str]:
    text = "\n".join(
        line.lstrip("# ")
        for path in [*(DEPLOY / "k8s").glob("*.yaml"), DEPLOY / "README.md"]
        for line in path.read_text().splitlines()
    )
    return set(re.findall(r"--from-literal=([A-Za-z_][A-Za-z0-9_]*)=", text))


def test_k8s_secret_references_are_created_by_the_documented_command() -> None:
    documented = _documented_secret_keys()
    assert "ADE_DATABASE_URL" in documented
    refs: set[str] = set()
    for _, doc in k8s_docs():
        assert doc["kind"] != "Secret", "no Secret manifests: create it with kubectl (README)"
        for container in pod_containers(doc):
            for env in container.get("env", []):
                ref = (env.get("valueFrom") or {}).get("secretKeyRef")
                if ref:
                    refs.add(ref["key"])
        for target in (doc.get("spec") or {}).get("secretTargetRef", []):
            refs.add(target["key"])
    assert refs and refs <= documented, f"not in `kubectl create secret`: {refs - documented}"


def test_systemd_units_run_as_an_unprivileged_user_with_the_example_env_file() -> None:
    units = sorted((DEPLOY / "systemd").glob("*.service"))
    assert len(units) >= 4
    for unit in units:
        service = dict(systemd_unit(unit)["Service"])
        assert service.get("User") not in (None, "root", "0"), unit.name
        env_file_path = service.get("EnvironmentFile", "").lstrip("-")
        assert env_file_path, f"{unit.name}: no EnvironmentFile"
        example = DEPLOY / "systemd" / (Path(env_file_path).name + ".example")
        assert example.exists(), f"{unit.name}: {env_file_path} has no example {example.name}"
