"""The Alembic migrations build exactly the schema the models describe."""

from __future__ import annotations

from pathlib import Path

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from ade_tasks.db.engine import create_db_engine
from ade_tasks.db.migrate import upgrade
from ade_tasks.db.schema import Base


def test_migrated_sqlite_schema_matches_the_models(tmp_path: Path) -> None:
    engine = create_db_engine(f"sqlite:///{tmp_path / 'ade.db'}")
    upgrade(engine)

    with engine.connect() as connection:
        diff = compare_metadata(MigrationContext.configure(connection), Base.metadata)

    assert diff == []
