"""Settings come from MESHPLAN_* variables; the default database is a SQLite file under
./var/ (created on first use)."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.core.config import Settings
from app.db.session import make_engine
from app.main import create_app
from tests.support import TestClient


def test_defaults() -> None:
    settings = Settings()
    assert settings.database_url == "sqlite:///./var/meshplan.db"
    assert settings.max_request_bytes == 1024 * 1024
    assert settings.search_workers == 2
    assert settings.default_search_time_limit_s == 60
    assert settings.max_search_time_limit_s == 600
    assert settings.max_top_k == 100
    assert settings.max_wait_s == 60
    assert settings.request_id_header == "X-Request-ID"


def test_environment_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MESHPLAN_DATABASE_URL", "postgresql+psycopg://u@db/x")
    monkeypatch.setenv("MESHPLAN_SEARCH_WORKERS", "5")
    monkeypatch.setenv("MESHPLAN_PLUGIN_ALLOWLIST", '["a", "b"]')
    settings = Settings()
    assert settings.database_kind == "postgresql"
    assert settings.search_workers == 5
    assert settings.plugin_allowlist == ["a", "b"]


def test_default_database_file_is_created_under_var(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    engine = make_engine(Settings().database_url)
    with engine.connect():
        pass
    engine.dispose()
    assert (tmp_path / "var" / "meshplan.db").is_file()


def test_limits_come_from_settings(settings_factory: object, tiny: dict[str, object]) -> None:
    app = create_app(settings_factory(max_top_k=3, max_wait_s=1))  # type: ignore[operator]
    with TestClient(app) as client:
        assert client.post("/v1/searches", json={**tiny, "top_k": 4}).status_code == 422
        assert client.post("/v1/searches?wait=2", json=tiny).status_code == 422
