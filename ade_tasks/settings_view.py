"""A settings object as people compare it: every setting that differs from its default, by its
`ADE_*` name, secrets as `(set)` and passwords in URLs hidden, so `ade-tasks settings` can show
this shell's settings beside the cluster's (`GET /api/v1/cluster/view`) without leaking either.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from pydantic import BaseModel, SecretStr

from ade_tasks.settings import Settings

SECRET = "(set)"


def settings_view(settings: Settings) -> dict[str, str]:
    """Each setting not at its default, as `ADE_NAME` (nested: `ADE_A__B`) -> shown value."""
    view: dict[str, str] = {}
    _walk(settings, "ADE_", view)
    return dict(sorted(view.items()))


def _walk(model: BaseModel, prefix: str, view: dict[str, str]) -> None:
    for name, info in type(model).model_fields.items():
        value = getattr(model, name)
        if value == info.get_default(call_default_factory=True):
            continue
        _put(f"{prefix}{name.upper()}", value, view)


def _put(key: str, value: object, view: dict[str, str]) -> None:
    if isinstance(value, BaseModel):
        _walk(value, f"{key}__", view)
    elif isinstance(value, dict):
        for name, item in value.items():
            _put(f"{key}__{str(name).upper().replace('-', '_')}", item, view)
    elif isinstance(value, SecretStr):
        view[key] = SECRET
    elif isinstance(value, str):
        view[key] = _without_password(value)
    elif isinstance(value, Path):
        view[key] = str(value)
    elif isinstance(value, tuple | list):
        view[key] = ",".join(map(str, value))
    else:
        view[key] = str(value)


def _without_password(text: str) -> str:
    """A URL's password replaced by `***` (database and broker URLs carry one)."""
    try:
        parts = urlsplit(text)
    except ValueError:
        return text
    if not parts.password:
        return text
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))
