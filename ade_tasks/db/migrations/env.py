"""Alembic environment: migrate the engine handed in by `ade_tasks.db.migrate`."""

from __future__ import annotations

from alembic import context

from ade_tasks.db.schema import Base

config = context.config
engine = config.attributes["engine"]

with engine.connect() as connection:
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
        # One transaction per migration, so a migration may build an index CONCURRENTLY in an
        # autocommit block (0017) with the migrations before it committed.
        transaction_per_migration=True,
    )
    with context.begin_transaction():
        context.run_migrations()
