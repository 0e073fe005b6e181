"""Settings of an ADE Tasks process, read once at the edges and passed in.

Defaults give the embedded mode (SQLite under ./.ade/, Celery's in-memory broker);
`ADE_DATABASE_URL` and `ADE_BROKER_URL` switch to PostgreSQL and Redis or RabbitMQ. They come
from the environment and from the env file (`.env` in the working directory; ade_tasks/env_file.py).
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, SecretStr, ValidationInfo, field_validator
from pydantic_settings import (
    BaseSettings,
    DotEnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from ade_tasks import api_address
from ade_tasks.api_address import DEFAULT_API_HOST, DEFAULT_API_PORT, ENV_PREFIX
from ade_tasks.env_file import check_env_file, env_file_path
from ade_tasks.errors import NotFoundError
from ade_tasks.hooks.config import HookConfig
from ade_tasks.rules.notify import NotificationEvent

EMBEDDED_DATA_DIR = api_address.EMBEDDED_DATA_DIR
EMBEDDED_BROKER_URL = "memory://localhost/"

#: Variables a command step inherits from the worker; everything else is dropped so that
#: database, broker and webhook secrets never reach a child process.
DEFAULT_ENV_ALLOWLIST = (
    "PATH",
    "HOME",
    "LANG",
    "LANGUAGE",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "USER",
    "LOGNAME",
    "SHELL",
    "TERM",
    "TMPDIR",
)


class GithubSettings(BaseModel):
    """Where GitHub lives and how webhooks from it are verified."""

    webhook_secret: SecretStr | None = None
    api_url: str = "https://api.github.com"
    token: SecretStr | None = None
    # Where agents' `github_push` pushes (`{git_url}/{owner}/{name}.git`); unset: derived from
    # api_url (https://api.github.com -> https://github.com, https://host/api/v3 -> https://host).
    git_url: str | None = None
    # GitHub caps a delivery at 25 MB; larger bodies are refused (413) before being buffered.
    max_body_bytes: int = Field(default=25 * 1024 * 1024, ge=1024)

    @field_validator("webhook_secret", "token")
    @classmethod
    def _no_placeholder(cls, value: SecretStr | None, info: ValidationInfo) -> SecretStr | None:
        if value is not None and "CHANGE_ME" in value.get_secret_value():
            name = f"ADE_GITHUB__{str(info.field_name).upper()}"
            raise ValueError(
                f"{name} still holds the CHANGE_ME placeholder from config/.env.example; "
                "set the real value or unset it"
            )
        return value

    # Repositories polling watches (a JSON list: '["acme/api"]'); empty: the `repo` filters of
    # enabled github.* triggers.
    poll_repos: list[str] = []
    # The engine's own GitHub logins (a JSON list: '["ade-bot[bot]"]'; the token's user or app):
    # a delivery they sent starts no rule unless its trigger says `include_own: true`, so an
    # agent's push or comment does not start its own rule again.
    bot_logins: list[str] = []
    # Whether the beats poll GitHub (claimed work, one poll per repository and interval):
    # `auto` polls when ADE_GITHUB__POLL_REPOS is set (the operator named what to poll) or no
    # webhook secret is set (every delivery would be refused, so polling is the only way in);
    # a cluster with the secret set receives webhooks and does not also poll, which would run
    # each rule twice. `on` / `off` decide outright.
    poll: Literal["auto", "on", "off"] = "auto"
    # Seconds between polls of a repository. Under 10 s spends GitHub's rate limit fast (5,000
    # requests an hour per token, at least 3 a poll per repository): meant for tests.
    poll_interval_seconds: float = Field(default=30.0, ge=1)

    @property
    def effective_git_url(self) -> str:
        """The git base URL pushes go to: `git_url`, or the web host of `api_url`."""
        if self.git_url:
            return self.git_url.rstrip("/")
        api = self.api_url.rstrip("/")
        if api.endswith("/api/v3"):
            return api.removesuffix("/api/v3")
        return api.replace("://api.", "://", 1)

    @property
    def polls_in_beats(self) -> bool:
        """Whether the beats poll GitHub (see `poll`)."""
        if self.poll != "auto":
            return self.poll == "on"
        return bool(self.poll_repos) or self.webhook_secret is None


class RelaySettings(BaseModel):
    """The relay, for clusters GitHub cannot reach (docs/webhooks.md, "Relay").

    `ade-tasks relay serve` (the public side) reads `token`, `database_url`, `host`, `port` and
    `retention_days`; the cluster's beats (the private side) read `url`, `token` and
    `drain_slot_seconds` and drain the relay while `url` is set.
    """

    url: str = ""  # the relay's base URL (https://relay.example.com); empty: no drain
    token: SecretStr | None = None  # the bearer token both sides share
    # The relay's own database (not the cluster's); empty: SQLite at <ADE_DATA_DIR>/relay.db.
    database_url: str = ""
    host: str = "127.0.0.1"
    port: int = Field(default=8788, ge=1, le=65535)
    # Verified deliveries are kept this long, drained or not, as the cluster keeps its
    # ingress_events: a cluster offline for longer misses the older ones.
    retention_days: int = Field(default=7, ge=1)
    # One beat at a time drains the relay for a slot of this many seconds, listening for its
    # wake-ups meanwhile; each slot starts with a safety poll.
    drain_slot_seconds: float = Field(default=30.0, ge=1)

    @field_validator("token")
    @classmethod
    def _no_placeholder(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and "CHANGE_ME" in value.get_secret_value():
            raise ValueError(
                "ADE_RELAY__TOKEN still holds the CHANGE_ME placeholder from "
                "config/.env.example; set the real token or unset it"
            )
        return value

    def retention(self) -> timedelta:
        """How long the relay keeps a delivery."""
        return timedelta(days=self.retention_days)

    def effective_database_url(self, data_dir: Path) -> str:
        """The relay's database: `database_url`, else SQLite at `<data_dir>/relay.db`."""
        return self.database_url or f"sqlite:///{(data_dir / 'relay.db').resolve()}"


class NotificationRoute(BaseModel):
    """Where cluster notifications go: one Apprise URL (`mailtos://`, `slack://`, `msteams://`,
    `matrixs://`, `json://`, ...) and the events it takes (default: all). The URL is a
    credential: it is never logged or shown."""

    url: SecretStr
    events: list[NotificationEvent] = Field(default_factory=lambda: list(NotificationEvent))

    @field_validator("url")
    @classmethod
    def _real_url(cls, value: SecretStr) -> SecretStr:
        url = value.get_secret_value()
        if "CHANGE_ME" in url:
            raise ValueError(
                "the route's URL still holds the CHANGE_ME placeholder from config/.env.example"
            )
        if "://" not in url:
            raise ValueError(
                "a route's url is an Apprise URL such as mailtos://user:pass@host/?to=ops@x.org "
                "or slack://T/B/C (https://github.com/caronc/apprise/wiki)"
            )
        return value


class NotificationSettings(BaseModel):
    """Cluster notifications (docs/notifications.md): named routes and how delivery retries.

    `ADE_NOTIFICATIONS__ROUTES__OPS__URL=mailtos://...` names a route `ops`; a rule may narrow
    or switch off its own (`notify:` in the rule). Delivery is off the run's path: events are
    written to an outbox and delivered by the housekeeping job `notifications` every
    `sweep_seconds`; a failed delivery is retried `attempts` times with exponential backoff
    from `retry_seconds` up to `max_retry_seconds`, each failure logged.
    """

    routes: dict[str, NotificationRoute] = Field(default_factory=dict)
    sweep_seconds: float = Field(default=10.0, gt=0)
    attempts: int = Field(default=5, ge=0, le=5)
    retry_seconds: float = Field(default=30.0, ge=0)
    max_retry_seconds: float = Field(default=3600.0, ge=0)


class ProviderSettings(BaseModel):
    """An LLM provider: an HTTP endpoint and key, or a CLI agent and the endpoint it calls.

    For the CLI agents (`claude-code`, `codex`), `api_key` and `base_url` reach only the
    engine's model proxy for the session (the CLI gets the proxy's address and a per-session
    token), `env` is added to the CLI's own environment only (never a command's or a tool's:
    the CLI's tools see it, so it holds settings, not secrets), and `config_home` is where each
    session's private config home is made (default: the system's temporary directory).
    """

    base_url: str | None = None
    api_key: SecretStr | None = None
    binary: str | None = None  # claude-code / codex: the CLI to run (default: found on PATH)
    env: dict[str, str] = Field(default_factory=dict)
    config_home: Path | None = None


class ModelPrice(BaseModel):
    """What a model costs, in US dollars per million tokens."""

    input_usd_per_mtok: float = Field(ge=0)
    output_usd_per_mtok: float = Field(ge=0)

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        """The cost of this many tokens."""
        return (
            input_tokens * self.input_usd_per_mtok + output_tokens * self.output_usd_per_mtok
        ) / 1_000_000


class Settings(BaseSettings):
    """Every knob of an ADE Tasks deployment, from `ADE_*` environment variables and the env
    file."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter="__",
        env_file=None,  # chosen per instance: settings_customise_sources
        extra="ignore",
        hide_input_in_errors=True,  # a bad hook config must not print its secrets
    )

    database_url: str = ""
    broker_url: str = EMBEDDED_BROKER_URL
    data_dir: Path = EMBEDDED_DATA_DIR
    rules_dir: Path = Path("config/rules")
    projects: dict[str, Path] = Field(default_factory=dict)

    # The API's address and token are read without this class by commands that only call the
    # API (ade_tasks/api_address.py, whose names and defaults these are).
    api_host: str = DEFAULT_API_HOST
    api_port: int = DEFAULT_API_PORT
    api_url: str = ""
    # The token the CLI sends (`ade-tasks tokens create`); else the file `ade-tasks dev` writes.
    api_token: SecretStr | None = None
    # uvicorn's per-request access log costs CPU on every webhook; off unless asked for.
    api_access_log: bool = False
    # Database connections an API process keeps open. Requests beyond it wait for a free one
    # instead of opening and closing extra connections under load.
    db_pool_size: int = Field(default=20, ge=1, le=200)

    github: GithubSettings = Field(default_factory=GithubSettings)
    relay: RelaySettings = Field(default_factory=RelaySettings)
    notifications: NotificationSettings = Field(default_factory=NotificationSettings)
    # Custom webhooks `POST /api/v1/webhooks/{hook}`: ADE_HOOKS__<hook>='{"scheme": ...}'.
    hooks: dict[str, HookConfig] = Field(default_factory=dict)
    # A webhook body must arrive within this many seconds (a slow-drip upload is cut off).
    ingress_read_timeout: float = Field(default=10.0, gt=0)
    providers: dict[str, ProviderSettings] = Field(default_factory=dict)
    # Prices per model for agent cost budgets:
    # ADE_MODEL_PRICES='{"gpt-4.1": {"input_usd_per_mtok": 2, "output_usd_per_mtok": 8}}'.
    model_prices: dict[str, ModelPrice] = Field(default_factory=dict)

    # Run path timing (seconds). The lease must outlive several heartbeats.
    lease_seconds: float = Field(default=60.0, gt=0)
    heartbeat_seconds: float = Field(default=15.0, gt=0)
    requeue_after_seconds: float = Field(default=60.0, ge=0)
    recovery_interval_seconds: float = Field(default=30.0, gt=0)
    # Workers take part in the claimed housekeeping (recovery sweep, pruning, lane cleanups), so
    # a cluster without a beat still recovers lost runs.
    worker_housekeeping: bool = True
    run_retention_days: int | None = Field(default=None, ge=1)
    kill_grace_seconds: float = Field(default=3.0, ge=0)

    # A simulated clock for the beats, for tests only: simulated time is `beat_clock_origin` at
    # the real moment `beat_clock_anchor` (default: process start) and runs `beat_clock_speed`
    # times as fast, so several beat processes share one simulated timeline.
    beat_clock_origin: datetime | None = None
    beat_clock_anchor: datetime | None = None
    beat_clock_speed: float = Field(default=1.0, gt=0)
    # A claim with no outcome after this long is re-fired by another beat (its claimant died).
    beat_stale_claim_seconds: float = Field(default=60.0, gt=0)

    # The cluster-wide kill switch (ADE_DISABLE_AUTOMATIONS=1): no trigger creates runs, not
    # even a manual run unless an admin forces it; schedule slots are recorded skipped and
    # webhook deliveries are stored and held until it is off. Every process reads it at start.
    disable_automations: bool = False

    # Run-seconds all rules together may use per UTC day (None: no cluster-wide cap).
    budget_run_seconds_per_day: float | None = Field(default=None, gt=0)
    # Where lanes (git worktrees) are created: <lanes_root>/<project>/<lane>.
    lanes_root: Path | None = None

    # Celery `task-sent` events (Flower shows tasks before a worker takes them); off by default
    # because they double the broker writes of every dispatch.
    task_sent_events: bool = False

    command_env_allowlist: tuple[str, ...] = DEFAULT_ENV_ALLOWLIST
    # The unprivileged users (names or uids, comma-separated) agent sessions and their tools
    # run as, one leased per session; None: the worker's own. Needs a worker running as root
    # (ade_workers/containment/agent_user.py).
    agent_user: str | None = None
    # Every agent process (a CLI with its hooks and tools, an HTTP session's bash) and every
    # run-command / run-tests command runs in a bubblewrap sandbox (ade_workers/sandbox/); where
    # none can be made such a step is refused. "off" is an admin's opt-out, named in every
    # capability report and step result.
    sandbox: Literal["required", "off"] = "required"
    worker_concurrency: int = Field(default=2, ge=1)

    # Observability (README "Metrics and logs"). False: `GET /metrics` needs a viewer token
    # (checked by the API's auth middleware); True: anyone who reaches the API may scrape it.
    metrics_public: bool = False
    # "json": one JSON object per log line with run_id/rule_id/task_id (worker, beat, API).
    log_format: Literal["text", "json"] = "text"
    # A worker serves its own Prometheus metrics on this port (None: no metrics server).
    worker_metrics_port: int | None = Field(default=None, ge=1, le=65535)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,  # noqa: ARG003  (replaced below)
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Where settings come from, the first to set one winning: arguments, the environment,
        the env file, secret files. The env file is chosen per instance (ADE_ENV_FILE or the
        working directory's `.env`) and checked line by line before it is read."""
        path = env_file_path(os.environ)
        if path is None:
            return init_settings, env_settings, file_secret_settings
        check_env_file(path)
        env_file = DotEnvSettingsSource(settings_cls, env_file=path)
        return init_settings, env_settings, env_file, file_secret_settings

    @field_validator("database_url", "broker_url")
    @classmethod
    def _no_placeholder(cls, value: str, info: ValidationInfo) -> str:
        if "CHANGE_ME" in value:
            name = f"ADE_{str(info.field_name).upper()}"
            raise ValueError(
                f"{name} still holds the CHANGE_ME placeholder from config/.env.example; "
                "set the real password"
            )
        return value

    @property
    def embedded(self) -> bool:
        """True when no database server is configured (the `ade-tasks dev` mode)."""
        return not self.database_url or self.database_url.startswith("sqlite")

    @property
    def effective_database_url(self) -> str:
        """The configured database, or the embedded SQLite file under `data_dir`."""
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.data_dir / 'ade.db').resolve()}"

    @property
    def effective_api_url(self) -> str:
        """The URL CLI commands talk to."""
        return api_address.effective_api_url(self.api_url, self.api_host, self.api_port)

    @property
    def dev_token_file(self) -> Path:
        """Where `ade-tasks dev` keeps the admin token of the local stack (mode 0600)."""
        return api_address.dev_token_file(self.data_dir)

    @property
    def effective_api_token(self) -> str | None:
        """The token CLI commands send: ADE_API_TOKEN, else the dev stack's token file."""
        token = None if self.api_token is None else self.api_token.get_secret_value()
        return api_address.effective_api_token(token, self.dev_token_file)

    def lanes_dir(self, project: str) -> Path:
        """Where the lanes of a project live (default: `<data_dir>/lanes/<project>`)."""
        root = self.lanes_root or (self.data_dir / "lanes")
        return Path(os.path.realpath(root / project))

    def provider(self, name: str) -> ProviderSettings | None:
        """A provider's settings by its rule name (`claude-code` is `CLAUDE_CODE` in env names)."""
        return self.providers.get(name) or self.providers.get(name.replace("-", "_"))

    def project_root(self, name: str) -> Path:
        """The real path of a configured project; `default` is the working directory."""
        if name in self.projects:
            return Path(os.path.realpath(self.projects[name]))
        if name == "default":
            return Path(os.path.realpath(Path.cwd()))
        known = ", ".join(sorted({"default", *self.projects}))
        raise NotFoundError(
            f"project {name!r} is not configured (known: {known}); "
            f"set ADE_PROJECTS__{name.upper()}=/path/to/repository"
        )


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process's settings, read from the environment and the env file once."""
    return Settings()
