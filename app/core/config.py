"""Service settings, read from `MESHPLAN_*` environment variables (pydantic-settings)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_SQLITE_PATH = Path("var") / "meshplan.db"


class Settings(BaseSettings):
    """Everything the service reads from its environment (prefix `MESHPLAN_`)."""

    model_config = SettingsConfigDict(env_prefix="MESHPLAN_", extra="ignore", frozen=True)

    database_url: str = f"sqlite:///./{DEFAULT_SQLITE_PATH.as_posix()}"
    """SQLAlchemy URL: `sqlite:///path.db` (default, under ./var/) or
    `postgresql+psycopg://user@host/db`."""
    max_request_bytes: int = Field(default=1024 * 1024, ge=1024)
    """Largest accepted request body; larger bodies get a 413 problem."""
    search_workers: int = Field(default=2, ge=1, le=256)
    """Searches that run at once."""
    search_executor: Literal["process", "thread"] = "process"
    """`process`: a spawn-context process pool (the solver is CPU-bound Python and would
    contend with the API for the GIL); `thread`: a thread pool (tests, tiny deployments)."""
    executor: Literal["local", "ray"] = "local"
    """Where searches run: `local` (this process's pool, of kind `search_executor`) or `ray`
    (Ray tasks on the cluster at `ray_address`; `app.services.executors`)."""
    ray_address: str | None = Field(
        default=None, validation_alias=AliasChoices("RAY_ADDRESS", "MESHPLAN_RAY_ADDRESS")
    )
    """Ray cluster to join (`RAY_ADDRESS`, Ray's own variable); unset or `local`: start a
    local Ray with `ray_num_cpus` CPUs."""
    ray_num_cpus: int | None = Field(default=None, ge=1)
    """CPUs of the local Ray started when `ray_address` is unset (None: Ray's default)."""
    search_shards: int = Field(default=1, ge=0, le=1024)
    """Shards one large training search is split into on Ray (1: none, 0: the cluster's
    CPUs). Off by default: on 2 CPUs a default-space search (1-2 s, branch-and-bound skips
    >99 % of it) runs slower split than whole (`bench/sharded_search.py`)."""
    shard_min_candidates: int = Field(default=5000, ge=1)
    """A search with fewer candidates than this runs whole in one Ray task."""
    replica_id: str | None = None
    """This replica's lease owner name (default: hostname-pid-random, new at every start; a
    fixed one lets a restarted replica take its own searches back at once)."""
    lease_s: float = Field(default=30.0, gt=0)
    """How long a claim on a search holds without a heartbeat; a dead replica's searches
    are taken over this long after its last heartbeat."""
    heartbeat_interval_s: float = Field(default=5.0, gt=0)
    """Time between two lease renewals of the searches this replica holds (< `lease_s`)."""
    lease_scan_interval_s: float = Field(default=2.0, gt=0)
    """Time between two scans for queued searches nobody holds and expired leases."""
    default_search_time_limit_s: float = Field(default=60.0, gt=0)
    """Search time limit when the request gives none."""
    max_search_time_limit_s: float = Field(default=600.0, gt=0)
    """Largest time limit a request may ask for."""
    max_top_k: int = Field(default=100, ge=1)
    """Largest `top_k` a search may ask for."""
    max_wait_s: float = Field(default=60.0, ge=0)
    """Largest `?wait=` a search creation may block for."""
    max_attempts: int = Field(default=2, ge=1)
    """Runs a search gets before a service restart marks it failed."""
    progress_interval_s: float = Field(default=0.5, gt=0)
    """Least time between two progress writes (and cancellation checks) of a search."""
    plugin_allowlist: list[str] = Field(default_factory=list)
    """Entry points of the `meshplan.cost_models` group that may load (empty: none)."""
    request_id_header: str = "X-Request-ID"
    """Header carrying the request id (taken from the request or generated)."""
    webhook_secret: SecretStr | None = None
    """Key of the HMAC-SHA256 signature of webhook bodies (`X-Meshplan-Signature`). Unset:
    searches with a `callback_url` are refused (422)."""
    webhook_allow_http: bool = False
    """Accept `http://` callback URLs (default: `https://` only; see
    `app.services.webhook_targets`)."""
    webhook_allow_hosts: list[str] = Field(default_factory=list)
    """Callback hosts exempt from the public-address rule (a JSON list, e.g.
    `["hooks.internal", "10.0.0.5"]`): internal receivers an operator trusts."""
    webhook_max_attempts: int = Field(default=6, ge=1, le=100)
    """HTTP attempts of one webhook delivery before it is marked failed."""
    webhook_base_delay_s: float = Field(default=2.0, gt=0)
    """Delay after the first failed attempt; it doubles after each further failure."""
    webhook_max_delay_s: float = Field(default=600.0, gt=0)
    """Cap on the delay between two attempts."""
    webhook_timeout_s: float = Field(default=10.0, gt=0)
    """Timeout of one webhook POST (connect, read, write and pool, each)."""
    webhook_poll_interval_s: float = Field(default=1.0, gt=0)
    """Longest time between two scans for finished searches with deliveries waiting (a
    search finishing in this process wakes the sender at once)."""
    sse_poll_interval_s: float = Field(default=0.25, gt=0)
    """Time between two database reads of a search streamed by `/events`."""
    sse_heartbeat_s: float = Field(default=15.0, gt=0)
    """Longest silence on an `/events` stream before a comment line keeps it open."""
    sse_max_duration_s: float = Field(default=300.0, gt=0)
    """An `/events` stream ends (without `done`) after this long; clients reconnect with
    `Last-Event-ID`. Bounds how long an open stream can hold up a graceful shutdown."""
    # ---- keys, tenants and limits (app.api.auth, app.api.limits) ----
    auth: Literal["on", "off"] = "off"
    """`on`: every tenant-data request needs `Authorization: Bearer <key>`. `off` (the
    default, so `make serve` on loopback works as before): every request is tenant
    `default` with all scopes; `meshplan serve` then refuses a non-loopback `--host` unless
    `allow_open`."""
    allow_open: bool = False
    """Let `meshplan serve` bind a non-loopback address with auth off."""
    admin_key: SecretStr | None = None
    """Bootstrap key: admin of `admin_tenant` (compared in constant time; never stored)."""
    admin_tenant: str = Field(default="admin", min_length=1, max_length=64)
    """Tenant the bootstrap admin key acts for."""
    rate_limit_per_s: float = Field(default=50.0, gt=0)
    """Requests per second each key (with auth off: each client address) may make on
    average (token bucket refill rate; per process unless `rate_limit_redis_url`)."""
    rate_limit_burst: int = Field(default=100, ge=1)
    """Requests a key may make at once before the rate applies (token bucket size)."""
    rate_limit_redis_url: str | None = None
    """Keep the rate buckets in this Redis (`redis://host:6379/0`) so that every replica
    shares one bucket per key; unset: each process keeps its own."""
    tenant_max_active_searches: int = Field(default=16, ge=1)
    """Queued plus running searches one tenant may have; more answer 429."""
    max_queued_searches: int = Field(default=256, ge=1)
    """Queued searches of all tenants together; more answer 503 (the queue is full)."""
    worker_max_memory_mb: int = Field(default=4096, ge=0)
    """Address-space cap (`RLIMIT_AS`) of every worker process, in MiB (0: none); a solve
    that needs more ends in a 507 problem (request work) or a failed search."""
    request_workers: int = Field(default=1, ge=1, le=64)
    """Worker processes for the solver work of single requests (expert placements, serving
    estimates, training estimates that place experts)."""
    request_worker_max_tasks: int = Field(default=20, ge=0)
    """Requests a request worker serves before it is replaced (its memory returns; 0: never)."""
    request_timeout_s: float = Field(default=60.0, gt=0)
    """Longest a request's solver work may run in a worker; past it the worker is killed
    and the request answers a 503 problem."""
    run_migrations: bool = True
    """Run `alembic upgrade head` at startup."""
    log_level: str = "INFO"
    log_format: Literal["json", "text"] = "json"
    """`json`: one JSON object a line with the request id (`app.core.logs`); `text` for a
    terminal."""
    api_threads: int = Field(default=128, ge=8, le=1024)
    """Worker threads of the API process for sync route handlers (anyio's default is 40;
    requests beyond them wait for a thread, never for an error). The database pool holds
    as many connections plus `db_pool_overflow`, so no handler waits for a connection."""
    worker_nice: int = Field(default=10, ge=0, le=19)
    """Nice value added to search and request worker processes (`os.nice`): below the API's
    priority, so liveness and reads answer while searches use every core (0: same
    priority)."""
    api_compute_threads: int = Field(default=4, ge=1, le=256)
    """Of those, how many may run closed-form estimates at once. Estimates are CPU-bound
    Python: more threads than cores add no throughput (one holds the GIL at a time) but each
    competes with the event loop for the GIL, so liveness and every other request wait
    longer; excess estimates wait on the event loop instead."""
    db_pool_overflow: int = Field(default=32, ge=0)
    """Connections beyond `api_threads` (runner, webhooks, readiness)."""
    db_pool_timeout_s: float = Field(default=10.0, gt=0)
    """Longest wait for a pooled database connection."""
    readiness_timeout_s: float = Field(default=2.0, gt=0)
    """`GET /v1/health/ready` answers 503 when its database check takes longer."""

    @property
    def database_kind(self) -> str:
        """`sqlite` or `postgresql`."""
        return "postgresql" if self.database_url.startswith("postgresql") else "sqlite"


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """Settings from the environment, read once."""
    return Settings()
