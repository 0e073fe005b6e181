"""Is each agent provider usable from this machine (`ade-tasks providers`, rule health, the
doctor): credentials by name, base URLs, installed CLIs, and the command that fixes what is
missing. Every provider of `ade_tasks.rules.providers.registry` is reported, in its order, as
what runs it declares: an HTTP adapter (`HTTP_PROVIDERS`) or a CLI (`CLI_FACTS`).

Nothing here starts a session or imports the CLI drivers, so the `providers` command stays quick.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ade_tasks.json_document import JsonObject
from ade_tasks.rules.providers.registry import PROVIDERS
from ade_workers.agents.cli.facts import CLI_FACTS, CliFacts
from ade_workers.agents.providers.registry import HTTP_PROVIDERS, HttpAdapter
from ade_workers.containment.process import run_process

VERSION_TIMEOUT = 5.0


class Which(Protocol):
    """`shutil.which`'s shape."""

    def __call__(self, cmd: str, mode: int = ..., path: str | None = ...) -> str | None: ...


@dataclass(frozen=True)
class ProviderStatus:
    """Is one provider usable from this machine, and if not, how to fix it. Never a secret."""

    name: str
    ready: bool
    credentials: str | None  # where they were found (a variable or file name), never a value
    base_url: str | None = None
    binary: str | None = None
    version: str | None = None
    fixes: tuple[str, ...] = ()

    def as_dict(self) -> JsonObject:
        """A JSON-ready form."""
        return {
            "name": self.name,
            "ready": self.ready,
            "credentials": self.credentials,
            "base_url": self.base_url,
            "binary": self.binary,
            "version": self.version,
            "fixes": list(self.fixes),
        }


def run_version(binary: str) -> str | None:
    """The first line of `<binary> --version`, or None if it fails or takes over 5 s."""
    try:
        result = run_process(
            [binary, "--version"],
            cwd=Path.cwd(),
            env=os.environ,
            timeout=VERSION_TIMEOUT,
            kill_grace=0.5,
            cap=4096,
        )
    except OSError:
        return None
    if result.exit_code != 0:
        return None
    lines = result.output.strip().splitlines()
    return lines[0].strip() if lines else None


def _first_var(env: Mapping[str, str], names: Sequence[str]) -> str | None:
    return next((name for name in names if env.get(name)), None)


def providers_report(
    env: Mapping[str, str],
    which: Which = shutil.which,
    run_version: Callable[[str], str | None] = run_version,
    home: Path | None = None,
) -> list[ProviderStatus]:
    """Which providers are usable here: credentials (by name), base URLs, installed CLIs.

    Reads only `env` and the home directory; no network calls."""
    home = home or Path(env.get("HOME") or Path.home())
    report: list[ProviderStatus] = []
    for name in PROVIDERS:
        adapter, cli = HTTP_PROVIDERS.get(name), CLI_FACTS.get(name)
        if adapter is not None:
            report.append(_http_status(name, adapter, env))
        elif cli is not None:
            report.append(_cli_status(cli, env, which, run_version))
        else:
            fix = f"update the workers: this version has no engine for provider {name}"
            report.append(ProviderStatus(name=name, ready=False, credentials=None, fixes=(fix,)))
    return report


def _http_status(name: str, adapter: HttpAdapter, env: Mapping[str, str]) -> ProviderStatus:
    prefix = PROVIDERS[name].settings_prefix
    key_vars = (prefix + "API_KEY", adapter.VENDOR_PREFIX + "API_KEY")
    key = _first_var(env, key_vars)
    url_var = _first_var(env, (prefix + "BASE_URL", adapter.VENDOR_PREFIX + "BASE_URL"))
    return ProviderStatus(
        name=name,
        ready=key is not None,
        credentials=key,
        base_url=env[url_var] if url_var else adapter.DEFAULT_BASE_URL,
        fixes=() if key else (f"export {key_vars[-1]}=... (or {key_vars[0]})",),
    )


def _cli_status(
    cli: CliFacts, env: Mapping[str, str], which: Which, run_version: Callable[[str], str | None]
) -> ProviderStatus:
    # A CLI session runs with a private home and reaches the provider only through the
    # engine's model proxy, so the CLI's own login (~/.claude, ~/.codex) does not apply:
    # the engine's settings are its credentials.
    path = which(env.get(cli.prefix + "BINARY") or cli.binary, path=env.get("PATH"))
    version = run_version(path) if path else None
    key = cli.prefix + "API_KEY"
    credentials = key if env.get(key) else None
    fixes = ([] if path else [cli.install]) + (
        [] if credentials else [f"export {key}=... (it reaches only the engine's proxy)"]
    )
    return ProviderStatus(
        name=cli.name,
        ready=path is not None and credentials is not None,
        credentials=credentials,
        base_url=env.get(cli.prefix + "BASE_URL") or cli.default_url,
        binary=path,
        version=version,
        fixes=tuple(fixes),
    )
