"""Alembic migrations, run programmatically (`ade-tasks db upgrade`), no alembic.ini needed."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine

MIGRATIONS_DIR = Path(__file__).parent / "migrations"


def alembic_config(engine: Engine) -> Config:
    """An Alembic config bound to this engine."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.attributes["engine"] = engine
    return config


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Bring the schema up to `revision`."""
    command.upgrade(alembic_config(engine), revision)


def current_revision(engine: Engine) -> str | None:
    """The schema revision the database is at, or None before the first migration."""
    from alembic.runtime.migration import MigrationContext

    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def head_revision() -> str | None:
    """The newest revision of this code's migrations."""
    from alembic.script import ScriptDirectory

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    return ScriptDirectory.from_config(config).get_current_head()


def schema_lag(engine: Engine) -> str | None:
    """What is wrong with the schema for this code, in words, or None when it is current (or
    cannot be read: then the database, not the schema, is the problem)."""
    try:
        current = current_revision(engine)
    except Exception:
        return None
    head = head_revision()
    if current == head:
        return None
    return (
        f"the database schema is at revision {current or 'none'} and this code needs {head}: "
        "run `ade-tasks db upgrade`"
    )
