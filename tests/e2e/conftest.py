"""End-to-end fixtures: the integration cluster (real PostgreSQL, Redis, worker and API
processes) for the browser tests."""

from tests.integration.conftest import (  # noqa: F401
    cluster,
    database_url,
    pg_template,
    project,
    redis_url,
)
