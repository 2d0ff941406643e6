"""Service settings, read from `MESHPLAN_*` environment variables (pydantic-settings)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr
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
    run_migrations: bool = True
    """Run `alembic upgrade head` at startup."""
    log_level: str = "INFO"

    @property
    def database_kind(self) -> str:
        """`sqlite` or `postgresql`."""
        return "postgresql" if self.database_url.startswith("postgresql") else "sqlite"


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """Settings from the environment, read once."""
    return Settings()
