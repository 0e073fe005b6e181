"""Integration fixtures on real services: PostgreSQL, Redis, RabbitMQ and `celery worker` processes.

A service that is unreachable skips the tests that need it locally, with the reason, and fails
them when `CI` is set. PostgreSQL: one migrated template database per session, cloned per test.
Redis: DB index 13, flushed around each test.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import redis
from pydantic import SecretStr
from sqlalchemy import create_engine, text

from ade_tasks.access.roles import Role
from ade_tasks.db import tokens as tokens_db
from ade_tasks.db.engine import SessionFactory, create_db_engine, create_session_factory
from ade_tasks.db.migrate import upgrade
from ade_tasks.rule_files.sync import sync_rules_dir
from ade_tasks.settings import Settings
from ade_workers.celery.app import CelerySender, create_celery_app
from tests.conftest import write_rule
from tests.support import BIN, WORKER, Child, child_env, free_port, redis_db_url, wait_until

PG_HOST = os.environ.get("ADE_TEST_PG_HOST", "127.0.0.1")
PG_ADMIN_URL = f"postgresql+psycopg://postgres@{PG_HOST}:5432/postgres"
REDIS_URL = redis_db_url(4)
RABBIT_VHOST = os.environ.get("ADE_TEST_RABBIT_VHOST", f"ade_test{WORKER and '_' + WORKER}")
RABBIT_URL = f"amqp://guest:guest@127.0.0.1:5672/{RABBIT_VHOST}"


def require(service: str, check: Callable[[], object]) -> None:
    """Skip locally when `service` is unreachable; fail under CI."""
    try:
        check()
    except Exception as exc:
        message = f"{service} is unreachable: {exc}"
        if os.environ.get("CI"):
            pytest.fail(f"{message} (CI must provide it; see .ci/run)")
        pytest.skip(message)


def _admin_execute(sql: str) -> None:
    engine = create_engine(
        PG_ADMIN_URL, isolation_level="AUTOCOMMIT", connect_args={"connect_timeout": 3}
    )
    try:
        with engine.connect() as connection:
            connection.execute(text(sql))
    finally:
        engine.dispose()


@pytest.fixture(scope="session")
def pg_template() -> Iterator[str]:
    require("PostgreSQL", lambda: _admin_execute("SELECT 1"))
    name = f"ade_it_tmpl_{os.getpid()}"
    _admin_execute(f"DROP DATABASE IF EXISTS {name}")
    _admin_execute(f"CREATE DATABASE {name}")
    engine = create_db_engine(PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}")
    upgrade(engine)
    engine.dispose()
    yield name
    _admin_execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
def database_url(pg_template: str) -> Iterator[str]:
    name = f"ade_it_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    _admin_execute(f"CREATE DATABASE {name} TEMPLATE {pg_template}")
    yield PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
    _admin_execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def own_redis_db(url: str) -> Iterator[str]:
    """A Redis database flushed around the test. Modules that count broker messages or must run
    beside other integration tests take their own index (see bench/common.py REDIS_DB_OWNERS)."""
    client = redis.Redis.from_url(url, socket_connect_timeout=2)
    require("Redis", client.ping)
    client.flushdb()
    yield url
    client.flushdb()
    client.close()


@pytest.fixture
def redis_url() -> Iterator[str]:
    yield from own_redis_db(REDIS_URL)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    return root


@dataclass
class Cluster:
    """One test's cluster: settings shared by its processes, and helpers to start them."""

    settings: Settings
    env: dict[str, str]
    tmp: Path
    session_factory: SessionFactory
    children: list[Child]

    @property
    def celery(self):  # type: ignore[no-untyped-def]
        return create_celery_app(self.settings)

    def sender(self) -> CelerySender:
        return CelerySender(self.celery)

    def sync_rules(self, rules_dir: Path) -> None:
        loaded, _ = sync_rules_dir(self.session_factory, rules_dir)
        assert not loaded.problems, loaded.problems

    def worker(
        self,
        queues: str = "ade.builtin,ade.agent,ade.control",
        concurrency: int = 2,
        beat: bool = False,
        env: dict[str, str] | None = None,
        prefix: list[str] | None = None,
        app: str = "ade_workers.celery.app",
    ) -> Child:
        """A real `celery worker` process, returned once it answers a ping. `prefix` wraps its
        command (e.g. `ip netns exec NAME` to run it on a network host of the test's own); `app`
        is the module holding the Celery app (a test's own wraps ADE's)."""
        name = f"it-{uuid.uuid4().hex[:8]}@localhost"
        argv = [
            *(prefix or []),
            str(BIN / "celery"),
            "-A",
            app,
            "worker",
            "-Q",
            queues,
            "-P",
            "prefork",
            "-c",
            str(concurrency),
            "-n",
            name,
            "--without-mingle",
            "--without-gossip",
            "--loglevel=INFO",
        ]
        if beat:
            argv += ["-B", "--scheduler", "ade_workers.celery.beat:DatabaseScheduler"]
        child = Child(argv, {**self.env, **(env or {})}, self.tmp / f"worker-{name}.log", self.tmp)
        self.children.append(child)
        control = self.celery.control
        wait_until(
            lambda: control.ping(destination=[name], timeout=0.5),
            60,
            f"worker {name} to answer a ping (log: {child.log})",
        )
        return child

    def beat(self, env: dict[str, str] | None = None) -> Child:
        """A real `ade-tasks beat` process (it drives the recovery sweep); `env` adds to the
        cluster's environment for this beat alone."""
        log = self.tmp / f"beat-{len(self.children)}.log"
        child = Child([str(BIN / "ade-tasks"), "beat"], {**self.env, **(env or {})}, log, self.tmp)
        self.children.append(child)
        wait_until(lambda: "beat: Starting" in child.output(), 60, f"beat to start ({child.log})")
        return child

    def api(self, env: dict[str, str] | None = None) -> httpx.Client:
        """A real `ade-tasks api` process and an HTTP client pointed at it."""
        port = free_port()
        argv = [str(BIN / "ade-tasks"), "api", "--port", str(port), "--no-sync-rules"]
        child = Child(argv, {**self.env, **(env or {})}, self.tmp / f"api-{port}.log", self.tmp)
        self.children.append(child)
        token = self.env["ADE_API_TOKEN"]
        client = httpx.Client(
            base_url=f"http://127.0.0.1:{port}",
            timeout=10,
            headers={"Authorization": f"Bearer {token}"},
        )
        wait_until(
            lambda: client.get("/healthz").status_code == 200, 60, f"the API (log: {child.log})"
        )
        return client


def terminate_backends(cluster: Cluster) -> None:
    """Kill every connection to the test's database (the API's, the workers', the test's own)."""
    name = cluster.settings.database_url.rsplit("/", 1)[1]
    _admin_execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        f"WHERE datname = '{name}' AND pid <> pg_backend_pid()"
    )
    cluster.session_factory.kw["bind"].dispose()  # the test's own pool held dead ones too


def api_with_hello_rule(cluster: Cluster) -> httpx.Client:
    """An API process for a cluster holding one manual rule, `hello`, that echoes."""
    write_rule(cluster.tmp / "rules", "hello.yaml", """
        id: hello
        triggers: [{type: manual}]
        execution: {kind: built-in, actions: [{type: run-command, command: "echo hi"}]}
        """)  # fmt: skip
    cluster.sync_rules(cluster.tmp / "rules")
    return cluster.api()


@pytest.fixture
def cluster(database_url: str, redis_url: str, project: Path, tmp_path: Path) -> Iterator[Cluster]:
    values = {
        "ADE_DATABASE_URL": database_url,
        "ADE_BROKER_URL": redis_url,
        "ADE_PROJECTS__DEFAULT": str(project),
        "ADE_LEASE_SECONDS": "3",
        "ADE_HEARTBEAT_SECONDS": "0.5",
        "ADE_REQUEUE_AFTER_SECONDS": "2",
        "ADE_RECOVERY_INTERVAL_SECONDS": "1",
        "ADE_KILL_GRACE_SECONDS": "1",
        # Beats poll GitHub only in the tests about polling (they opt in), never github.com.
        "ADE_GITHUB__POLL": "off",
    }
    settings = Settings(
        database_url=database_url,
        broker_url=redis_url,
        projects={"default": project},
        lease_seconds=3,
        heartbeat_seconds=0.5,
        requeue_after_seconds=2,
        recovery_interval_seconds=1,
    )
    engine = create_db_engine(database_url)
    session_factory = create_session_factory(engine)
    with session_factory.begin() as session:  # the CLI and test clients call as an admin
        _, values["ADE_API_TOKEN"] = tokens_db.create_token(session, "tests", Role.ADMIN, "tests")
    settings = settings.model_copy(update={"api_token": SecretStr(values["ADE_API_TOKEN"])})
    cluster = Cluster(settings, child_env(values), tmp_path, session_factory, [])
    yield cluster
    for child in cluster.children:
        child.kill()
    engine.dispose()


def _rabbitmqctl(*args: str, check: bool = True) -> None:
    subprocess.run(["rabbitmqctl", "-q", *args], check=check, capture_output=True, timeout=60)


@pytest.fixture(scope="session")
def rabbitmq_url() -> Iterator[str]:
    def fresh_vhost() -> None:
        _rabbitmqctl("delete_vhost", RABBIT_VHOST, check=False)
        _rabbitmqctl("add_vhost", RABBIT_VHOST)
        _rabbitmqctl("set_permissions", "-p", RABBIT_VHOST, "guest", ".*", ".*", ".*")

    require("RabbitMQ", fresh_vhost)
    yield RABBIT_URL
    _rabbitmqctl("delete_vhost", RABBIT_VHOST, check=False)
