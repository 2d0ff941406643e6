"""Service settings, read from `MESHPLAN_*` environment variables (pydantic-settings)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field
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
