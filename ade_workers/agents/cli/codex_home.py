"""A Codex session's own CODEX_HOME: the `config.toml` that points codex at the engine's
provider and asks for every approval, the execpolicy rules file that makes every command ask,
and an empty HOME, so no user or project settings reach the session."""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Literal

Sandbox = Literal["read-only", "workspace-write"]
#: What codex is told: its own sandbox, or none inside the engine's (`danger-full-access`).
CodexSandboxMode = Literal["read-only", "workspace-write", "danger-full-access"]

#: The variable that carries the provider key; only the codex process gets it, and codex keeps
#: it out of the commands it runs (`shell_environment_policy.inherit = "core"`).
KEY_VARIABLE = "ADE_CODEX_API_KEY"
PROVIDER = "ade"
RULES_FILE = "ade.rules"
#: Programs every rules file names, found on PATH or not: shells and their builtins that run
#: other code (`.`, `source`, `eval`, ...), interpreters, codex's own "known safe" list (which
#: it would otherwise run without asking) and common tools.
BASE_PROGRAMS = (
    "bash sh zsh dash fish ksh env sudo su nohup setsid timeout xargs time nice exec eval "
    "python python3 node nodejs perl ruby php lua deno bun npm npx pip pip3 uv make git "
    "cat cd cut echo expr false grep head id ls nl paste pwd rev seq stat tail tr true uname "
    "uniq wc which whoami base64 find rg sed numfmt tac awk sort diff less more file du df "
    "touch cp mv rm mkdir rmdir ln chmod chown curl wget tee dd tar gzip unzip apply_patch "
    "applypatch . source command builtin exec eval trap alias"
).split()
_PROGRAM_NAME = re.compile(r"^[A-Za-z0-9._+-]+$")
# Features that bring tools outside the approval protocol (sub-agents, web, images, apps,
# plugins, memories, goals) or read state outside the session (shell snapshots).
_FEATURES_OFF = (
    "goals",
    "apps",
    "plugins",
    "memories",
    "image_generation",
    "browser_use",
    "computer_use",
    "tool_suggest",
    "shell_snapshot",
    "hooks",
    "view_image",
    "skill_search",
)


def _toml(value: str) -> str:
    return json.dumps(value)  # a JSON string is a TOML basic string


def session_config(
    *,
    model: str,
    base_url: str,
    sandbox: CodexSandboxMode,
    command_env: Mapping[str, str] | None = None,
) -> str:
    """The `config.toml` of one session: the engine's provider, sandbox and approval policy,
    and nothing that reaches outside the session."""
    lines = [
        f"model = {_toml(model)}",
        f"model_provider = {_toml(PROVIDER)}",
        'approval_policy = "on-request"',
        'approvals_reviewer = "user"',
        f"sandbox_mode = {_toml(sandbox)}",
        'web_search = "disabled"',
        "check_for_update_on_startup = false",
        "project_doc_max_bytes = 0",
        "",
        "[sandbox_workspace_write]",
        "network_access = false",
        "exclude_tmpdir_env_var = true",
        "exclude_slash_tmp = true",
        "",
        "[features]",
        *(f"{name} = false" for name in _FEATURES_OFF),
        "",
        "[agents]",
        "enabled = false",
        "",
        "[shell_environment_policy]",
        'inherit = "core"',
        # The egress proxy's variables, when the rule names hosts (`network_hosts`).
        *(
            [f"set = {{ {', '.join(f'{k} = {_toml(v)}' for k, v in command_env.items())} }}"]
            if command_env
            else []
        ),
        "",
        "[history]",
        'persistence = "none"',
        "",
        "[analytics]",
        "enabled = false",
        "",
        f"[model_providers.{PROVIDER}]",
        'name = "ADE"',
        f"base_url = {_toml(base_url)}",
        f"env_key = {_toml(KEY_VARIABLE)}",
        'wire_api = "responses"',
        "request_max_retries = 0",
        "stream_max_retries = 0",
        "",
    ]
    return "\n".join(lines)


def program_names(path: str, worktree: Path) -> list[str]:
    """Every program name a command could start: `BASE_PROGRAMS`, the executables on `path`
    and those in the worktree (names that cannot be written in a rule are left out)."""
    names = set(BASE_PROGRAMS)
    directories = [Path(entry) for entry in path.split(os.pathsep) if entry]
    for directory in directories:
        with contextlib.suppress(OSError):
            for entry in os.scandir(directory):
                names.add(entry.name)
    for root, dirs, files in os.walk(worktree):
        dirs[:] = [d for d in dirs if d != ".git"]
        for name in files:
            if os.access(os.path.join(root, name), os.X_OK):
                names.add(name)
    return sorted(name for name in names if _PROGRAM_NAME.match(name))


def exec_rules(names: Iterable[str]) -> str:
    """An execpolicy rules file that makes codex ask before running any of `names` (matched
    by basename, so `/bin/cat` and `./cat` are `cat`)."""
    alternatives = ", ".join(_toml(name) for name in sorted(set(names)))
    return (
        "# Written by ADE Tasks for one session: every command asks the engine first.\n"
        f'prefix_rule(pattern=[[{alternatives}]], decision="prompt", '
        'justification="the engine decides every command")\n'
    )


def write_session_home(
    codex_home: Path,
    *,
    model: str,
    base_url: str,
    sandbox: CodexSandboxMode,
    path: str,
    worktree: Path,
    command_env: Mapping[str, str] | None = None,
) -> Path:
    """Fill `codex_home` (config, rules, an empty HOME) for one session; the HOME it made."""
    home = codex_home / "home"
    (codex_home / "rules").mkdir(parents=True, exist_ok=True)
    home.mkdir(parents=True, exist_ok=True)
    (codex_home / "config.toml").write_text(
        session_config(
            model=model, base_url=base_url, sandbox=sandbox, command_env=command_env
        ),
        encoding="utf-8",
    )
    (codex_home / "rules" / RULES_FILE).write_text(
        exec_rules(program_names(path, worktree)), encoding="utf-8"
    )
    return home
