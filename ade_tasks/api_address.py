"""Where the CLI finds the HTTP API and which token it sends, read without building `Settings`.

A command that only calls the API (`ade-tasks runs list`) needs four of the settings, and
building `Settings` imports pydantic and pydantic-settings: about a third of such a command's
start-up (bench/cli_startup.py). `ApiAddress.from_environment` reads the same variables from the
same places (the environment over the env file, ade_tasks/env_file.py) and `Settings` derives
its `effective_api_url` / `effective_api_token` with the functions below, so the two cannot
disagree (tests/unit/ade_tasks/test_api_address.py compares them case by case). Other settings are
not read, so a bad value of one of them does not stop such a command (`ade-tasks doctor` names it).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ade_tasks.env_file import environment_with_env_file

#: The prefix of every setting's environment variable (`Settings.model_config`).
ENV_PREFIX = "ADE_"
#: The settings an API address is made of, by their `Settings` field names.
API_URL, API_HOST, API_PORT, API_TOKEN, DATA_DIR = (
    "api_url", "api_host", "api_port", "api_token", "data_dir"
)  # fmt: skip
DEFAULT_API_HOST = "127.0.0.1"
DEFAULT_API_PORT = 8787
#: Where the embedded (`ade-tasks dev`) mode keeps its files, the dev token among them.
EMBEDDED_DATA_DIR = Path(".ade")


def variable(field: str) -> str:
    """The environment variable of a setting: `api_url` -> `ADE_API_URL`."""
    return f"{ENV_PREFIX}{field}".upper()


def effective_api_url(api_url: str, api_host: str, api_port: int) -> str:
    """The URL CLI commands talk to: ADE_API_URL, else the address the API listens on."""
    if api_url:
        return api_url.rstrip("/")
    host = "127.0.0.1" if api_host in ("0.0.0.0", "::") else api_host
    return f"http://{host}:{api_port}"


def dev_token_file(data_dir: Path) -> Path:
    """Where `ade-tasks dev` keeps the admin token of the local stack (mode 0600)."""
    return data_dir / "api-token"


def effective_api_token(api_token: str | None, token_file: Path) -> str | None:
    """The token CLI commands send: ADE_API_TOKEN, else the dev stack's token file."""
    if api_token is not None:
        return api_token
    try:
        return token_file.read_text().strip() or None
    except OSError:
        return None


@dataclass(frozen=True)
class ApiAddress:
    """The API a CLI command calls and the token it sends, as `Settings` would give them."""

    effective_api_url: str
    effective_api_token: str | None
    dev_token_file: Path

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] = os.environ) -> ApiAddress:
        """Read from `environ` over the env file; names match in any case, as in `Settings`.
        Raises ValueError (naming the variable or the env file's line) where `Settings` would."""
        values = {name.upper(): value for name, value in environment_with_env_file(environ).items()}
        port = values.get(variable(API_PORT))
        try:
            api_port = DEFAULT_API_PORT if port is None else int(port)
        except ValueError:
            raise ValueError(
                f"{variable(API_PORT)}: {port!r} is not a port number; set a number such as "
                f"{DEFAULT_API_PORT}"
            ) from None
        url = effective_api_url(
            values.get(variable(API_URL), ""),
            values.get(variable(API_HOST), DEFAULT_API_HOST),
            api_port,
        )
        token_file = dev_token_file(Path(values.get(variable(DATA_DIR), EMBEDDED_DATA_DIR)))
        token = effective_api_token(values.get(variable(API_TOKEN)), token_file)
        return cls(effective_api_url=url, effective_api_token=token, dev_token_file=token_file)
