"""The files under deploy/, read: every command they run (Dockerfile, Compose, Kubernetes,
systemd) with where it runs, and every group of environment variables they set.

Shared by the tests of tests/unit/deploy/ (and tests/integration/test_flower.py); nothing is
built or started.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[3]
DEPLOY = ROOT / "deploy"
WRAPPERS = {"tini", "dumb-init"}  # init wrappers in front of a command: `tini -- ade-tasks ...`


@dataclass
class Command:
    source: str
    argv: list[str]
    # Where it runs: the container's env (k8s: name -> value or valueFrom) or the unit's keys.
    context: dict[str, Any] = field(default_factory=dict)

    @property
    def program(self) -> str:
        return Path(self.argv[0]).name if self.argv else ""


@dataclass
class EnvGroup:
    """Variables set together for one process (a service, a container, a file)."""

    source: str
    values: dict[str, str | None]  # None: the value comes from a Secret


# --- reading the files ------------------------------------------------------------------------


def deploy_files() -> list[Path]:
    return sorted(p for p in DEPLOY.rglob("*") if p.is_file() and p.name != "README.md")


def yaml_docs(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def dockerfile_instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        full = (pending + line).strip()
        pending = ""
        instruction, _, rest = full.partition(" ")
        out.append((instruction.upper(), rest.strip()))
    return out


def _exec_form(rest: str) -> list[str]:
    if rest.startswith("["):
        value = json.loads(rest)
        assert isinstance(value, list)
        return [str(v) for v in value]
    return shlex.split(rest)


def systemd_unit(path: Path) -> dict[str, list[tuple[str, str]]]:
    """Sections of a unit file, each a list of (key, value) in file order."""
    sections: dict[str, list[tuple[str, str]]] = {}
    current = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = line[1:-1]
            sections.setdefault(current, [])
            continue
        key, sep, value = line.partition("=")
        assert sep and current, f"{path.name}: cannot parse line {raw!r}"
        sections[current].append((key.strip(), value.strip()))
    return sections


def systemd_argv(value: str) -> list[str]:
    value = value.lstrip("-@:+!")  # systemd's prefixes: ignore failure, argv0, privileges
    return [token.replace("%%", "%") for token in shlex.split(value)]


def env_file(path: Path) -> dict[str, str | None]:
    values: dict[str, str | None] = {}
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, value = line.partition("=")
        assert sep, f"{path.name}: not NAME=value: {raw!r}"
        values[name.strip()] = value.strip()
    return values


def compose() -> dict[str, Any]:
    docs = yaml_docs(DEPLOY / "docker-compose.yml")
    assert len(docs) == 1
    return docs[0]


def _compose_env(environment: Any) -> dict[str, str | None]:
    if environment is None:
        return {}
    if isinstance(environment, list):
        pairs = [str(item).partition("=") for item in environment]
        return {name: value for name, _, value in pairs}
    return {str(k): None if v is None else str(v) for k, v in environment.items()}


def k8s_docs() -> list[tuple[str, dict[str, Any]]]:
    return [(p.name, doc) for p in sorted((DEPLOY / "k8s").glob("*.yaml")) for doc in yaml_docs(p)]


def pod_containers(doc: dict[str, Any]) -> list[dict[str, Any]]:
    if doc.get("kind") not in ("Deployment", "StatefulSet", "DaemonSet", "Job"):
        return []
    spec = doc["spec"]["template"]["spec"]
    return [*spec.get("initContainers", []), *spec["containers"]]


def _container_env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


# --- every command and every environment group -----------------------------------------------


def all_commands() -> list[Command]:
    commands: list[Command] = []
    for instruction, rest in dockerfile_instructions(DEPLOY / "Dockerfile"):
        if instruction in ("CMD", "ENTRYPOINT", "RUN"):
            commands.append(Command(f"Dockerfile {instruction}", _exec_form(rest)))
    for name, service in compose()["services"].items():
        command = service.get("command")
        if command is not None:
            argv = shlex.split(command) if isinstance(command, str) else [str(c) for c in command]
            env = _compose_env(service.get("environment"))
            commands.append(Command(f"docker-compose.yml service {name}", argv, env))
    for file, doc in k8s_docs():
        for container in pod_containers(doc):
            argv = [str(a) for a in (*container.get("command", []), *container.get("args", []))]
            source = f"k8s/{file} {doc['metadata']['name']}/{container['name']}"
            commands.append(Command(source, argv, _container_env(container)))
    for unit in sorted((DEPLOY / "systemd").glob("*.service")):
        service = systemd_unit(unit).get("Service", [])
        for key, value in service:
            if key.startswith("Exec"):
                pre = [v for k, v in service if k == "ExecStartPre"]
                files = [v for k, v in service if k == "EnvironmentFile"]
                context = {"pre": pre, "env_files": files}
                commands.append(Command(f"systemd/{unit.name} {key}", systemd_argv(value), context))
    return [_unwrap(c) for c in commands]


def _unwrap(command: Command) -> Command:
    argv = command.argv
    if argv and Path(argv[0]).name in WRAPPERS:
        argv = argv[argv.index("--") + 1 :] if "--" in argv else argv[1:]
    return Command(command.source, argv, command.context)


def all_env_groups() -> list[EnvGroup]:
    groups: list[EnvGroup] = []
    image_env: dict[str, str | None] = {}
    for instruction, rest in dockerfile_instructions(DEPLOY / "Dockerfile"):
        if instruction == "ENV":
            tokens = shlex.split(rest)
            if all("=" in t for t in tokens):
                image_env.update(dict(t.split("=", 1) for t in tokens))
            else:  # legacy `ENV NAME value`
                image_env[tokens[0]] = " ".join(tokens[1:])
    groups.append(EnvGroup("Dockerfile ENV", image_env))
    for name, service in compose()["services"].items():
        groups.append(
            EnvGroup(f"docker-compose.yml {name}", _compose_env(service.get("environment")))
        )
    for file, doc in k8s_docs():
        if doc.get("kind") == "ConfigMap":
            data = {str(k): str(v) for k, v in (doc.get("data") or {}).items()}
            groups.append(EnvGroup(f"k8s/{file} ConfigMap {doc['metadata']['name']}", dict(data)))
        for container in pod_containers(doc):
            env = {
                name: value if isinstance(value, str) else None
                for name, value in _container_env(container).items()
            }
            groups.append(EnvGroup(f"k8s/{file} {doc['metadata']['name']}", env))
    for unit in sorted((DEPLOY / "systemd").glob("*.service")):
        env: dict[str, str | None] = {}
        for key, value in systemd_unit(unit).get("Service", []):
            if key == "Environment":
                env.update(dict(t.split("=", 1) for t in shlex.split(value)))
        groups.append(EnvGroup(f"systemd/{unit.name}", env))
    for example in sorted(DEPLOY.rglob("*.env.example")):
        groups.append(EnvGroup(str(example.relative_to(DEPLOY)), env_file(example)))
    return groups


def _deployments() -> dict[str, dict[str, Any]]:
    return {doc["metadata"]["name"]: doc for _, doc in k8s_docs() if doc["kind"] == "Deployment"}


def _main_argv(doc: dict[str, Any]) -> list[str]:
    container = doc["spec"]["template"]["spec"]["containers"][0]
    return [str(a) for a in (*container.get("command", []), *container.get("args", []))]
