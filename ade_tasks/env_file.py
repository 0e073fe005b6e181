"""The env file: `.env` in a process's working directory, whose template is config/.env.example.

Every ADE Tasks process (the CLI, the API, workers and beats, `celery -A ade_workers.celery.app`)
reads it through `Settings`; a variable set in the environment wins over the file, setting by
setting. `ADE_ENV_FILE` names another file (which must exist) or, set empty, none.

python-dotenv skips a line it cannot parse with only a log message, and an unclosed quote takes
every line after it along, so settings would silently not apply: such a file is refused instead,
by file and line. The line's text is never shown, as it may hold a secret.

python-dotenv and pydantic-settings (whose `SettingsError` a refused file raises, as `Settings`
raises its own) are imported when a file is read or refused: a CLI command that reads only the
API address (ade_tasks/api_address.py) starts without pydantic.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import NoReturn

#: The file read when ADE_ENV_FILE is not set, relative to the working directory.
DEFAULT_ENV_FILE = Path(".env")
ENV_FILE_VARIABLE = "ADE_ENV_FILE"
#: The setting a line is about, as far as a line that does not parse tells.
_SETTING = re.compile(r"\s*(?:export\s+)?(ADE_\w+)", re.IGNORECASE)


def env_file_path(environ: Mapping[str, str]) -> Path | None:
    """The env file to read: the one ADE_ENV_FILE names (None if it is empty), else `.env`
    if the working directory has one."""
    named = environ.get(ENV_FILE_VARIABLE)
    if named is None:
        return DEFAULT_ENV_FILE if DEFAULT_ENV_FILE.is_file() else None
    if not named:
        return None
    path = Path(named).expanduser()
    if not path.is_file():
        _refuse(
            f"{ENV_FILE_VARIABLE} names {path}, which is not a file; point it at the env file "
            "to read, or set it empty to read none"
        )
    return path


def environment_with_env_file(environ: Mapping[str, str]) -> dict[str, str]:
    """`environ` over the env file's variables, for code that reads settings by their variable
    names rather than through `Settings` (the providers report)."""
    path = env_file_path(environ)
    if path is None:
        return dict(environ)
    from dotenv import dotenv_values

    check_env_file(path)
    from_file = {name: value for name, value in dotenv_values(path).items() if value is not None}
    return {**from_file, **environ}


def check_env_file(path: Path) -> None:
    """Refuse an env file with lines python-dotenv cannot parse, naming each line."""
    from dotenv.parser import parse_stream

    try:
        with path.open(encoding="utf-8") as stream:
            unparsed = [binding.original for binding in parse_stream(stream) if binding.error]
    except UnicodeDecodeError as exc:
        _refuse(f"{path} is not UTF-8 text ({exc.reason}); save it as UTF-8")
    if unparsed:
        where = ", ".join(_line(original.line, original.string) for original in unparsed)
        _refuse(
            f"{path} {where} cannot be parsed: write one NAME=value a line, quote a value "
            "with spaces or # in it ('...' or \"...\") and close every quote"
        )


def _line(number: int, text: str) -> str:
    setting = _SETTING.match(text)
    return f"line {number} ({setting[1]})" if setting else f"line {number}"


def _refuse(message: str) -> NoReturn:
    from pydantic_settings import SettingsError

    raise SettingsError(message) from None
