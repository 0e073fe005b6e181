"""Alembic environment: migrate the engine handed in by `ade_tasks.db.migrate`."""

from __future__ import annotations

from alembic import context

from ade_tasks.db.schema import Base

config = context.config
engine = config.attributes["engine"]

with engine.begin() as connection:
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    context.run_migrations()
