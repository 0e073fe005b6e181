"""Static checks of deploy/: every file parses, every command it runs exists in the CLI with the
options it passes, every environment variable it sets is a real setting, and the shapes the
deployment relies on hold (non-root image, two beats, probes, Flower behind auth with its
password in no command line and bound to loopback, queue coverage).

Nothing is built or started: Docker is not needed.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import shlex
import tomllib
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union, get_args, get_origin

import click
import pytest
import yaml
from celery.bin.beat import beat as celery_beat_command
from celery.bin.worker import worker as celery_worker_command
from flower.options import options as flower_options
from pydantic import BaseModel

from ade_api.cli import main as cli
from ade_api.http.routes.health import router as health_router
from ade_tasks.settings import Settings
from ade_workers.celery.app import AGENT_QUEUE, DEFAULT_QUEUES, create_celery_app

ROOT = Path(__file__).resolve().parents[3]
DEPLOY = ROOT / "deploy"
CELERY_APP_MODULE = "ade_workers.celery.app"

# Variables the deploy files may set that are not ADE settings, each with its reason. Anything
# else that does not start with ADE_ must be a real setting (see `is_setting`).
ALLOWED_OTHER_ENV = {
    "POSTGRES_USER": "the postgres image creates this role",
    "POSTGRES_PASSWORD": "the postgres image sets the role's password",
    "POSTGRES_DB": "the postgres image creates this database",
    "FLOWER_BASIC_AUTH": "user:password; Flower reads it from its environment, never argv",
    "PATH": "the image puts its virtualenv first",
    "PYTHONUNBUFFERED": "logs reach the container runtime / journal at once",
    "PYTHONDONTWRITEBYTECODE": "no .pyc files in the image's working directory",
    "PIP_DISABLE_PIP_VERSION_CHECK": "build stage of the image",
    "PIP_NO_CACHE_DIR": "build stage of the image",
}

# Celery subcommands a deploy file may run directly (everything else goes through ade-tasks).
CELERY_SUBCOMMANDS = {"worker", "beat", "flower"}
# `ade-tasks worker` / `ade-tasks beat` pass unknown options on to these Celery commands.
PASSTHROUGH = {"worker": celery_worker_command, "beat": celery_beat_command}
# Each file type under deploy/ and how it is read; a new kind of file must be added here.
KNOWN_FILE_KINDS = ("Dockerfile", ".dockerignore", ".yml", ".yaml", ".service", ".env.example",
                    ".json")  # fmt: skip
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


# --- settings: which environment names are real ----------------------------------------------


def _unwrap_optional(annotation: Any) -> Any:
    if get_origin(annotation) in (Union, types.UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return annotation


def _model_accepts(model: type[BaseModel], parts: list[str]) -> bool:
    """Does `model` read the environment name made of `parts` (split at the nested delimiter)?"""
    names: dict[str, Any] = {}
    for name, info in model.model_fields.items():
        names[name.lower()] = info.annotation
        for alias in (info.alias, info.validation_alias):
            if isinstance(alias, str):
                names[alias.lower()] = info.annotation
    annotation = names.get(parts[0].lower())
    if annotation is None:
        return False
    if len(parts) == 1:
        return True  # the whole field (nested models and dicts take JSON)
    annotation = _unwrap_optional(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return _model_accepts(annotation, parts[1:])
    if get_origin(annotation) is dict:
        if not parts[1]:
            return False
        if len(parts) == 2:
            return True  # ADE_PROJECTS__<NAME>, ADE_HOOKS__<HOOK>
        value = _unwrap_optional(get_args(annotation)[1])
        if isinstance(value, type) and issubclass(value, BaseModel):
            return _model_accepts(value, parts[2:])
    return False


def is_setting(name: str) -> bool:
    """True when `name` is an environment variable the Settings model reads."""
    config = Settings.model_config
    prefix = str(config.get("env_prefix", ""))
    delimiter = config.get("env_nested_delimiter") or None
    case_sensitive = bool(config.get("case_sensitive", False))
    key, want = (name, prefix) if case_sensitive else (name.upper(), prefix.upper())
    for info in Settings.model_fields.values():  # an alias is read without the prefix
        for alias in (info.alias, info.validation_alias):
            if isinstance(alias, str) and alias.upper() == key.upper():
                return True
    if not key.startswith(want) or key == want:
        return False
    rest = key[len(want) :]
    parts = rest.split(delimiter) if delimiter else [rest]
    return _model_accepts(Settings, parts)


def test_setting_names_come_from_the_model() -> None:
    assert is_setting("ADE_DATABASE_URL") and is_setting("ade_broker_url")
    assert is_setting("ADE_GITHUB__TOKEN") and is_setting("ADE_GITHUB__WEBHOOK_SECRET")
    assert is_setting("ADE_PROJECTS__DEFAULT") and is_setting("ADE_HOOKS__DEPLOYS")
    assert is_setting("ADE_PROVIDERS__OPENAI__API_KEY") and is_setting("ADE_DB_POOL_SIZE")
    for wrong in (
        "ADE_DATABSE_URL",
        "ADE_GITHUB__TOKN",
        "ADE_PROVIDERS__OPENAI__KEY",
        "ADE_PROJECTS__",
        "ADE_",
        "ADE_WORKER_QUEUES",
        "DATABASE_URL",
    ):
        assert not is_setting(wrong), wrong


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


def test_every_file_under_deploy_is_a_kind_this_test_reads() -> None:
    files = deploy_files()
    assert files, "deploy/ is empty"
    for path in files:
        assert path.name.endswith(KNOWN_FILE_KINDS), f"{path}: no check reads this kind of file"
        if path.suffix in (".yml", ".yaml"):
            assert yaml_docs(path), f"{path} holds no YAML document"
        if path.suffix == ".json":
            assert isinstance(json.loads(path.read_text()), dict), f"{path}: not a JSON object"
        if path.suffix == ".service":
            sections = systemd_unit(path)
            assert {"Unit", "Service", "Install"} <= set(sections), path.name


def test_commands_are_found_in_every_kind_of_file() -> None:
    sources = {c.source.split(" ")[0].split("/")[0] for c in all_commands() if c.program}
    assert {"Dockerfile", "docker-compose.yml", "k8s", "systemd"} <= sources
    ade = [c for c in all_commands() if c.program == "ade-tasks"]
    assert len(ade) >= 15, [c.source for c in ade]


# --- commands exist in the CLI ---------------------------------------------------------------


def _option_names(command: click.Command) -> dict[str, click.Option]:
    return {
        name: param
        for param in command.params
        if isinstance(param, click.Option)
        for name in (*param.opts, *param.secondary_opts)
    }


def resolve_cli(args: list[str]) -> tuple[click.Command, list[str], list[str], click.Context]:
    """The click command `ade-tasks args...` names, its path, the arguments left for it, and
    the context of its group to make its own context under (`make_context(..., parent=)`).

    Contexts are made as click makes them when the command runs, each under its parent: a
    context made without its parent lacks the root's `-h`, and click caches the help option
    it builds from that on the command object, so later `-h` tests of it would fail."""
    command: click.Command = cli
    ctx = click.Context(cli, info_name="ade-tasks", **cli.context_settings)
    path: list[str] = []
    rest = list(args)
    while isinstance(command, click.Group):
        assert rest and not rest[0].startswith("-"), (
            f"`ade-tasks {' '.join(path)}` needs a subcommand, got {rest[:1]}"
        )
        name = rest.pop(0)
        sub = command.get_command(ctx, name)  # the groups import their commands lazily
        assert sub is not None, (
            f"`ade-tasks {' '.join([*path, name])}` does not exist; "
            f"`ade-tasks {' '.join(path)}` has: {', '.join(command.list_commands(ctx))}"
        )
        command, path = sub, [*path, name]
        if isinstance(command, click.Group):
            ctx = click.Context(command, info_name=name, parent=ctx, **command.context_settings)
    return command, path, rest, ctx


def check_passthrough(celery_command: click.Command, args: list[str], where: str) -> None:
    options = _option_names(celery_command)
    i = 0
    while i < len(args):
        token = args[i]
        i += 1
        if not token.startswith("-"):
            raise AssertionError(f"{where}: unexpected argument {token!r}")
        name = token.split("=", 1)[0]
        option = options.get(name)
        assert option is not None, f"{where}: celery {celery_command.name} has no option {name}"
        if not option.is_flag and "=" not in token:
            i += 1


def check_ade_command(command: Command) -> None:
    leaf, path, rest, parent = resolve_cli(command.argv[1:])
    where = f"{command.source}: `ade-tasks {' '.join(path)}`"
    try:  # click parses the options as the real command would: names, types and ranges
        ctx = leaf.make_context(path[-1], list(rest), parent=parent, resilient_parsing=False)
    except click.ClickException as exc:
        raise AssertionError(f"{where}: {exc.format_message()}") from exc
    if path[-1] in PASSTHROUGH and ctx.params.get("celery_args"):
        check_passthrough(PASSTHROUGH[path[-1]], list(ctx.params["celery_args"]), where)


def celery_invocation(argv: list[str]) -> tuple[str, str, list[str]]:
    """(app module, subcommand, its arguments) of `celery -A module sub ...`."""
    app, rest = "", list(argv[1:])
    while rest and rest[0].startswith("-"):
        token = rest.pop(0)
        if token in ("-A", "--app"):
            app = rest.pop(0)
        elif token.startswith(("-A=", "--app=")):
            app = token.split("=", 1)[1]
        else:
            raise AssertionError(f"unexpected celery option {token}")
    assert rest, f"no celery subcommand in {argv}"
    return app, rest[0], rest[1:]


def flower_option_values(args: list[str]) -> dict[str, str]:
    known = set(flower_options.as_dict())
    values: dict[str, str] = {}
    i = 0
    while i < len(args):
        token = args[i]
        i += 1
        assert token.startswith("--"), f"flower takes --name=value options, got {token!r}"
        name, sep, value = token[2:].partition("=")
        key = name.replace("-", "_")
        assert key in known, f"flower has no option --{name}"
        if not sep and i < len(args) and not args[i].startswith("--"):
            value, i = args[i], i + 1
        values[key] = value
    return values


def check_celery_command(command: Command) -> None:
    app, sub, args = celery_invocation(command.argv)
    assert app == CELERY_APP_MODULE, f"{command.source}: celery -A {app!r}"
    module = importlib.import_module(app)
    assert callable(getattr(module, "create_celery_app", None))
    assert sub in CELERY_SUBCOMMANDS, f"{command.source}: celery {sub}"
    if sub == "flower":
        flower_option_values(args)
    else:
        check_passthrough(PASSTHROUGH[sub], args, command.source)


def test_every_command_exists_with_its_options() -> None:
    for command in all_commands():
        if command.program == "ade-tasks":
            check_ade_command(command)
        elif command.program == "celery":
            check_celery_command(command)


def test_the_command_checks_can_fail() -> None:
    def ade(*argv: str) -> Command:
        return Command("probe", ["ade-tasks", *argv])

    for bad in (
        ade("workers"),
        ade("db", "migrate"),
        ade("api", "--port", "high"),
        ade("api", "--threads", "2"),
        ade("worker", "--loglevl", "INFO"),
    ):
        with pytest.raises(AssertionError):
            check_ade_command(bad)
    check_ade_command(ade("worker", "-Q", "ade.agent", "-c", "1", "-n", "a@%h", "-l", "INFO"))
    with pytest.raises(AssertionError):
        check_celery_command(Command("probe", ["celery", "-A", "ade_workers.app", "worker"]))
    with pytest.raises(AssertionError):
        check_celery_command(
            Command("probe", ["celery", "-A", CELERY_APP_MODULE, "flower", "--basic-auht=a:b"])
        )


# --- environment variables are settings ------------------------------------------------------

PLACEHOLDER = re.compile(r"\$\{[^}]*\}|\$\([A-Za-z_][A-Za-z0-9_]*\)")


def test_every_variable_set_is_a_setting_or_allowed() -> None:
    seen = 0
    for group in all_env_groups():
        for name in group.values:
            seen += 1
            if name.upper().startswith("ADE_"):
                assert is_setting(name), f"{group.source}: {name} is not an ADE setting"
            else:
                assert name in ALLOWED_OTHER_ENV, (
                    f"{group.source}: {name} is neither an ADE setting nor in ALLOWED_OTHER_ENV"
                )
    assert seen > 30


def test_every_value_set_is_valid_for_its_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    """Types and ranges: the settings each group sets build a Settings without an error."""
    for group in all_env_groups():
        for name in list(os.environ):
            if name.upper().startswith("ADE_"):
                monkeypatch.delenv(name)
        for name, value in group.values.items():
            if name.upper().startswith("ADE_") and value is not None:
                # ${...} / $(...) are filled in at deploy time; CHANGE_ME is a placeholder the
                # settings refuse on purpose, so an unedited example fails fast.
                concrete = PLACEHOLDER.sub("x", value).replace("CHANGE_ME", "secret")
                monkeypatch.setenv(name, concrete)
        try:
            Settings()
        except Exception as exc:
            raise AssertionError(f"{group.source}: {exc}") from exc


# --- the shapes the deployment relies on ------------------------------------------------------


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


def _is_beat(argv: list[str]) -> bool:
    if argv[:1] and Path(argv[0]).name == "ade-tasks":
        return argv[1:2] == ["beat"]
    return Path(argv[0]).name == "celery" and "beat" in argv if argv else False


def _worker_queues(argv: list[str]) -> list[str] | None:
    """The queues `ade-tasks worker` / `celery worker` consumes, None if argv is not a worker."""
    if not argv or Path(argv[0]).name not in ("ade-tasks", "celery") or "worker" not in argv:
        return None
    if Path(argv[0]).name == "ade-tasks":
        leaf, _, rest, parent = resolve_cli(argv[1:])
        ctx = leaf.make_context("worker", list(rest), parent=parent)
        return str(ctx.params["queues"]).split(",")
    for flag in ("-Q", "--queues"):
        if flag in argv:
            return argv[argv.index(flag) + 1].split(",")
    return list(DEFAULT_QUEUES)


def _worker_concurrency(argv: list[str]) -> int:
    leaf, _, rest, parent = resolve_cli(argv[1:])
    value = leaf.make_context("worker", list(rest), parent=parent).params["concurrency"]
    return int(value) if value is not None else Settings().worker_concurrency


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


def _deployments() -> dict[str, dict[str, Any]]:
    return {doc["metadata"]["name"]: doc for _, doc in k8s_docs() if doc["kind"] == "Deployment"}


def _main_argv(doc: dict[str, Any]) -> list[str]:
    container = doc["spec"]["template"]["spec"]["containers"][0]
    return [str(a) for a in (*container.get("command", []), *container.get("args", []))]


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


# --- no secret on a command line (`ps`, /proc/<pid>/cmdline) ---------------------------------

SECRET_NAME = re.compile(r"PASSWORD|SECRET|TOKEN|BASIC_AUTH|API_KEY|CREDENTIAL|(^|_)KEY$", re.I)
SECRET_OPTION = re.compile(
    r"^--?[\w-]*(password|passwd|secret|token|basic[-_]auth|api[-_]key|credential)[\w-]*(=|$)",
    re.I,
)
URL_PASSWORD = re.compile(r"://[^/\s:@]*:[^@\s/]+@")
# What the deployer expands into argv, by kind of file; an escaped reference ($$ in systemd and
# Compose, $$( in Kubernetes) reaches the program as text, for its own shell to expand.
EXPANDED = {
    "docker-compose.yml": re.compile(r"(?<!\$)\$\{?([A-Za-z_][A-Za-z0-9_]*)"),
    "k8s": re.compile(r"(?<!\$)\$\(([A-Za-z_][A-Za-z0-9_]*)\)"),
    "systemd": re.compile(r"(?<!\$)\$\{?([A-Za-z_][A-Za-z0-9_]*)"),
    "Dockerfile": re.compile(r"(?<!\$)\$\{?([A-Za-z_][A-Za-z0-9_]*)"),
}


def secrets_in_argv(command: Command) -> list[str]:
    """What of `command`'s argv is a secret once deployed: a secret variable expanded into it,
    a credential option given a value, a URL with a password."""
    kind = command.source.split(" ")[0].split("/")[0]
    found = []
    for token in command.argv:
        for name in EXPANDED[kind].findall(token):
            if SECRET_NAME.search(name):
                found.append(f"${name} in {token!r}")
        option = SECRET_OPTION.match(token)
        if option and (option.group(2) == "=" and token.split("=", 1)[1]):
            found.append(f"credential option {token.split('=', 1)[0]}")
        if URL_PASSWORD.search(token):
            found.append(f"a URL with a password in {token!r}")
    return found


def test_no_command_line_carries_a_secret() -> None:
    for command in all_commands():
        assert not secrets_in_argv(command), (
            f"{command.source}: {secrets_in_argv(command)}; pass secrets in the environment "
            "(argv is world-readable in ps and /proc/<pid>/cmdline)"
        )


def test_the_secret_checks_can_fail() -> None:
    flower = ["celery", "-A", CELERY_APP_MODULE, "flower"]
    for source, argv in (
        ("docker-compose.yml service f", [*flower, "--basic-auth=ops:hunter2"]),
        ("docker-compose.yml service f", [*flower, "--basic-auth=${FLOWER_BASIC_AUTH:?set}"]),
        ("k8s/flower.yaml f/f", [*flower, "--basic-auth=$(FLOWER_BASIC_AUTH)"]),
        ("systemd/f.service ExecStart", [*flower, "--basic-auth=${FLOWER_BASIC_AUTH}"]),
        ("systemd/f.service ExecStart", [*flower, "--basic-auth", "$FLOWER_BASIC_AUTH"]),
        ("k8s/x.yaml w/w", ["ade-tasks", "worker", "--broker=redis://:pw@redis:6379/0"]),
        ("systemd/a.service ExecStart", ["ade-tasks", "api", "--token=abc"]),
        ("docker-compose.yml service a", ["sh", "-c", "run --key $ADE_GITHUB__TOKEN"]),
    ):
        assert secrets_in_argv(Command(source, argv)), argv
    for source, argv in (
        ("systemd/f.service ExecStartPre", ["/bin/sh", "-c", 'test -n "$${FLOWER_BASIC_AUTH}"']),
        ("k8s/f.yaml f/f", ["sh", "-c", "test -n $$(FLOWER_BASIC_AUTH)"]),
        ("docker-compose.yml service f", [*flower, "--address=127.0.0.1", "--port=5555"]),
        ("k8s/x.yaml w/w", ["ade-tasks", "worker", "--broker=redis://redis:6379/0"]),
    ):
        assert not secrets_in_argv(Command(source, argv)), argv


def test_workers_send_task_events_without_dash_e() -> None:
    # Flower sees runs because the app turns worker events on; the deploy files pass no -E.
    assert create_celery_app(Settings()).conf.worker_send_task_events is True


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


def test_the_readme_walks_through_every_file() -> None:
    readme = (DEPLOY / "README.md").read_text()
    for path in deploy_files():
        assert path.name in readme, f"deploy/README.md does not mention {path.name}"


# --- one migration step per deploy -------------------------------------------------------------

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


#: The Python 3 each distribution the walkthrough may name ships as `python3`.
DISTRIBUTION_PYTHON = {"Debian 12": "3.11", "Debian 13": "3.13", "Ubuntu 22.04": "3.10",
                       "Ubuntu 24.04": "3.12"}  # fmt: skip


def test_the_walkthrough_uses_the_python_its_distributions_ship() -> None:
    """Issue 37, finding 11: `python3.12` on Debian 12 (which ships 3.11) does not exist. The
    commands use the distribution's `python3`, and every distribution the walkthrough names
    ships one that ADE supports."""
    readme = (DEPLOY / "README.md").read_text()
    commands = "\n".join(re.findall(r"```sh\n(.*?)```", readme, re.S))
    versioned = re.findall(r"\bpython3\.\d+\b", commands)
    assert not versioned, f"deploy/README.md runs {versioned}: use the distribution's python3"
    assert re.search(r"\bpython3 -m venv\b", commands)
    named = {name: v for name, v in DISTRIBUTION_PYTHON.items() if f"{name}: {v}" in readme}
    assert "Debian 12" in named, "say which python3 Debian 12 ships"
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    needed = tuple(int(p) for p in re.findall(r"\d+", requires))  # ">=3.11"
    for name, version in named.items():
        assert tuple(map(int, version.split("."))) >= needed, f"{name} ships Python {version}"
