"""No deploy file puts a secret on a command line, which every user of the machine can read
(`ps`, /proc/<pid>/cmdline): no secret variable expanded into argv, no credential option
given a value, no URL with a password.
"""

from __future__ import annotations

import re

from tests.unit.deploy.command_lines import CELERY_APP_MODULE
from tests.unit.deploy.deploy_files import Command, all_commands

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
