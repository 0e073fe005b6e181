"""history partitions (PostgreSQL only): `runs` by `queued_at`, `run_steps` by `started_at` and
`run_events` by `at` become range-partitioned tables, one partition per UTC month plus a DEFAULT
partition, so expired history is dropped a month at a time instead of deleted row by row; SQLite
is unchanged.

A partitioned table's unique indexes must hold its partition key, so on PostgreSQL:
- the primary keys become (id, time column); the ORM keeps `id` as the key (ids are unique);
- `runs.idempotency_key` stays globally unique through `run_keys` (key -> run id): a BEFORE
  INSERT trigger on `runs` claims the key there and skips the run's row when the key is taken,
  which is what every run INSERT's `ON CONFLICT DO NOTHING` meant (two racing inserts of a key
  wait on `run_keys`' primary key exactly as they waited on the unique index);
- `run_steps`' (run id, index) becomes (run id, index, started_at): a step's announcement and its
  outcome carry the same `started_at`;
- the foreign keys to `runs.id` (from run_steps, run_events, approvals) cannot exist: an AFTER
  DELETE trigger on `runs` does what their ON DELETE CASCADE did (and frees the run's key), and
  the partition job deletes the same rows explicitly before it drops a partition.

The rows are moved: every table is renamed, created anew, filled with INSERT ... SELECT and
the old one dropped, in the migration's one transaction. The three tables are locked for the
whole copy (docs/operations.md, "Upgrading to the partitioned history").

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-03
"""

from __future__ import annotations

from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None

#: table -> (partition column, unique indexes as (name, columns) after the primary key's)
TABLES: dict[str, tuple[str, list[tuple[str, str]]]] = {
    "runs": ("queued_at", []),
    "run_steps": ("started_at", [("uq_run_steps_run_id_index", 'run_id, "index", started_at')]),
    "run_events": ("at", []),
}
#: unique indexes of the unpartitioned tables that cannot stay unique: name -> replacement
DEMOTED = {
    "uq_runs_idempotency_key": "CREATE INDEX ix_runs_idempotency_key ON runs (idempotency_key)",
}
#: months of partitions made ahead of the current one (the partition job keeps it so)
AHEAD = 3

RUN_KEY_TRIGGERS = """
CREATE FUNCTION ade_claim_run_key() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO run_keys (idempotency_key, run_id) VALUES (NEW.idempotency_key, NEW.id)
    ON CONFLICT (idempotency_key) DO NOTHING;
    IF NOT FOUND THEN
        RETURN NULL;  -- the key is another run's: skip this row, as ON CONFLICT DO NOTHING did
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER runs_claim_key BEFORE INSERT ON runs
    FOR EACH ROW EXECUTE FUNCTION ade_claim_run_key();
CREATE FUNCTION ade_runs_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM run_steps WHERE run_id IN (SELECT id FROM gone);
    DELETE FROM run_events WHERE run_id IN (SELECT id FROM gone);
    DELETE FROM approvals WHERE run_id IN (SELECT id FROM gone);
    DELETE FROM run_keys WHERE run_id IN (SELECT id FROM gone);
    RETURN NULL;
END $$;
CREATE TRIGGER runs_deleted AFTER DELETE ON runs REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT EXECUTE FUNCTION ade_runs_deleted();
"""


def _months(first: str | None) -> list[str]:
    """The first days of the months from `first`'s (or this one) to AHEAD months ahead."""
    bind = op.get_bind()
    return list(
        bind.exec_driver_sql(
            "SELECT to_char(m, 'YYYY-MM-DD') FROM generate_series("
            "date_trunc('month', least(coalesce(%(first)s::timestamptz, now()), now()) "
            "AT TIME ZONE 'UTC'), date_trunc('month', now() AT TIME ZONE 'UTC') "
            f"+ interval '{AHEAD} months', interval '1 month') AS m",
            {"first": first},
        ).scalars()
    )


def _partition(table: str, column: str) -> None:
    """Move `table` into a partitioned table of the same name, indexes and sequence."""
    bind = op.get_bind()
    indexes = bind.exec_driver_sql(
        "SELECT i.indexname, i.indexdef FROM pg_indexes i WHERE i.tablename = %(t)s "
        "AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conname = i.indexname)",
        {"t": table},
    ).all()
    first = bind.exec_driver_sql(f"SELECT min({column})::text FROM {table}").scalar()
    op.execute(f"ALTER TABLE {table} RENAME TO {table}_unpartitioned")
    op.execute(
        f"CREATE TABLE {table} (LIKE {table}_unpartitioned INCLUDING DEFAULTS) "
        f"PARTITION BY RANGE ({column})"
    )
    for month in _months(first):
        name = f"{table}_p{month[:4]}_{month[5:7]}"
        op.execute(
            f"CREATE TABLE {name} PARTITION OF {table} FOR VALUES FROM ('{month} 00:00+00') "
            f"TO ('{_next_month(month)} 00:00+00')"
        )
    op.execute(f"CREATE TABLE {table}_default PARTITION OF {table} DEFAULT")
    op.execute(f"INSERT INTO {table} SELECT * FROM {table}_unpartitioned")
    if table != "runs":  # the id sequence goes with the new table, not with the dropped one
        op.execute(f"ALTER SEQUENCE {table}_id_seq OWNED BY {table}.id")
    if table == "runs":  # the foreign keys to the old table (no partitioned table can have them)
        for child in ("run_steps", "run_events", "approvals"):
            op.execute(f"ALTER TABLE {child} DROP CONSTRAINT fk_{child}_run_id_runs")
    op.execute(f"DROP TABLE {table}_unpartitioned")
    op.execute(f"ALTER TABLE {table} ADD CONSTRAINT pk_{table} PRIMARY KEY (id, {column})")
    for name, columns in TABLES[table][1]:
        op.execute(f"ALTER TABLE {table} ADD CONSTRAINT {name} UNIQUE ({columns})")
    for _name, definition in indexes:
        op.execute(definition.replace(" ON public.", " ON ", 1))
    for demoted, replacement in DEMOTED.items():
        if demoted.startswith(f"uq_{table}_"):
            op.execute(replacement)


def _next_month(month: str) -> str:
    year, number = int(month[:4]), int(month[5:7])
    return f"{year + number // 12}-{number % 12 + 1:02d}-01"


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(
        "CREATE TABLE run_keys (idempotency_key varchar(255) NOT NULL, "
        "run_id varchar(36) NOT NULL, CONSTRAINT pk_run_keys PRIMARY KEY (idempotency_key))"
    )
    op.execute("INSERT INTO run_keys SELECT idempotency_key, id FROM runs")
    op.execute("CREATE INDEX ix_run_keys_run_id ON run_keys (run_id)")
    for table, (column, _unique) in TABLES.items():
        _partition(table, column)
    op.execute(RUN_KEY_TRIGGERS)


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    bind = op.get_bind()
    op.execute("DROP TRIGGER runs_deleted ON runs")
    op.execute("DROP TRIGGER runs_claim_key ON runs")
    op.execute("DROP FUNCTION ade_runs_deleted()")
    op.execute("DROP FUNCTION ade_claim_run_key()")
    for table, (_column, unique) in TABLES.items():
        if table != "runs":  # rows the foreign key would refuse: their run is gone
            op.execute(f"DELETE FROM {table} AS c WHERE NOT EXISTS "
                       "(SELECT 1 FROM runs WHERE runs.id = c.run_id)")  # fmt: skip
        indexes = bind.exec_driver_sql(
            "SELECT i.indexname, i.indexdef FROM pg_indexes i WHERE i.tablename = %(t)s "
            "AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conname = i.indexname) "
            "AND i.indexname <> 'ix_runs_idempotency_key'",
            {"t": table},
        ).all()
        op.execute(f"ALTER TABLE {table} RENAME TO {table}_partitioned")
        op.execute(f"CREATE TABLE {table} (LIKE {table}_partitioned INCLUDING DEFAULTS)")
        op.execute(f"INSERT INTO {table} SELECT * FROM {table}_partitioned")
        if table != "runs":
            op.execute(f"ALTER SEQUENCE {table}_id_seq OWNED BY {table}.id")
        op.execute(f"DROP TABLE {table}_partitioned CASCADE")
        op.execute(f"ALTER TABLE {table} ADD CONSTRAINT pk_{table} PRIMARY KEY (id)")
        for name, columns in unique:
            op.execute(f"ALTER TABLE {table} ADD CONSTRAINT {name} UNIQUE "
                       f"({columns.replace(', started_at', '')})")  # fmt: skip
        for _name, definition in indexes:
            op.execute(definition.replace(" ON ONLY public.", " ON ", 1))
    op.execute("ALTER TABLE runs ADD CONSTRAINT uq_runs_idempotency_key UNIQUE (idempotency_key)")
    op.execute(
        "DELETE FROM approvals AS c WHERE NOT EXISTS (SELECT 1 FROM runs WHERE runs.id = c.run_id)"
    )
    for child in ("run_steps", "run_events", "approvals"):
        op.execute(
            f"ALTER TABLE {child} ADD CONSTRAINT fk_{child}_run_id_runs FOREIGN KEY (run_id) "
            "REFERENCES runs (id) ON DELETE CASCADE"
        )
    op.execute("DROP TABLE run_keys")
