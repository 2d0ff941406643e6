"""The worker (`execute_search`) against a real database with stand-in search functions:
errors become stored problems, progress is written (throttled), cancellation is seen by
should_stop, and a search no longer queued is not run."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import Engine
from sqlmodel import Session

from app.db import crud, migrate
from app.db.session import make_engine
from app.services.planning import SearchOutcome
from app.services.runner import execute_search
from specs.errors import InfeasiblePlan


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    engine = make_engine(f"sqlite:///{tmp_path / 'r.db'}")
    migrate.upgrade(engine)
    yield engine
    engine.dispose()


def _queued(engine: Engine) -> str:
    with Session(engine, expire_on_commit=False) as session:
        return crud.create_search(
            session=session,
            request={},
            problem={"p": 1},
            request_hash="0" * 64,
            cost_model_name="analytical",
            cost_model_version="1",
        ).id


def _record(engine: Engine, search_id: str) -> Any:
    with Session(engine, expire_on_commit=False) as session:
        return crud.get_search(session=session, search_id=search_id)


def _run(engine: Engine, search_id: str, run: Any, interval_s: float = 0.0) -> str | None:
    return execute_search(
        search_id,
        engine=engine,
        stop_event=threading.Event(),
        progress_interval_s=interval_s,
        run=run,
    )


def test_domain_errors_are_stored_as_problems(engine: Engine) -> None:
    search_id = _queued(engine)

    def run(problem: dict[str, Any], **_: Any) -> SearchOutcome:
        assert problem == {"p": 1}
        raise InfeasiblePlan("memory", "needs 90 GiB of 80")

    assert _run(engine, search_id, run) == "failed"
    record = _record(engine, search_id)
    assert record.error["type"] == "https://meshplan.dev/problems/infeasible-plan"
    assert record.error["status"] == 422 and record.error["kind"] == "memory"
    assert record.error["detail"] == "needs 90 GiB of 80"
    assert record.error["instance"] == f"/v1/searches/{search_id}"


def test_unexpected_errors_are_logged_and_generic(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    search_id = _queued(engine)

    def run(problem: dict[str, Any], **_: Any) -> SearchOutcome:
        raise ZeroDivisionError("secret detail")

    assert _run(engine, search_id, run) == "failed"
    record = _record(engine, search_id)
    assert record.error["status"] == 500
    assert "secret detail" not in str(record.error)
    assert "secret detail" in caplog.text


def test_progress_is_written_and_throttled(engine: Engine) -> None:
    search_id = _queued(engine)
    seen: list[int] = []

    def run(problem: dict[str, Any], *, progress: Any, should_stop: Any) -> SearchOutcome:
        progress(5, 100)
        seen.append(_record(engine, search_id).progress_evaluated)
        progress(6, 100)  # within the interval: not written
        seen.append(_record(engine, search_id).progress_evaluated)
        return SearchOutcome(plans=[], stats={"wall_time_s": 0.1})

    assert _run(engine, search_id, run, interval_s=3600) == "succeeded"
    assert seen == [0, 0]  # the first write waits for the interval too (last write at t=0)
    record = _record(engine, search_id)
    assert (record.progress_evaluated, record.progress_total) == (6, 100)  # final write
    assert record.stats == {"wall_time_s": 0.1}


def test_progress_with_a_short_interval_is_visible(engine: Engine) -> None:
    search_id = _queued(engine)
    seen: list[tuple[int, int | None]] = []

    def run(problem: dict[str, Any], *, progress: Any, should_stop: Any) -> SearchOutcome:
        progress(5, 100)
        record = _record(engine, search_id)
        seen.append((record.progress_evaluated, record.progress_total))
        return SearchOutcome(plans=[], stats={})

    _run(engine, search_id, run, interval_s=1e-9)
    assert seen == [(5, 100)]


def test_should_stop_sees_a_cancel(engine: Engine) -> None:
    search_id = _queued(engine)
    polls = 0

    def run(problem: dict[str, Any], *, progress: Any, should_stop: Any) -> SearchOutcome:
        nonlocal polls
        assert not should_stop()
        with Session(engine) as session:
            crud.cancel_search(session=session, search_id=search_id)
        deadline = time.monotonic() + 5
        while not should_stop():
            polls += 1
            assert time.monotonic() < deadline
            time.sleep(0.01)
        return SearchOutcome(plans=[], stats={"status": "cancelled"})

    assert _run(engine, search_id, run) == "cancelled"
    record = _record(engine, search_id)
    assert record.status == "cancelled" and record.finished_at is not None
    assert polls >= 1  # the status read is throttled, not immediate


def test_a_cancelled_queued_search_never_runs(engine: Engine) -> None:
    search_id = _queued(engine)
    with Session(engine) as session:
        crud.cancel_search(session=session, search_id=search_id)

    def run(problem: dict[str, Any], **_: Any) -> SearchOutcome:
        raise AssertionError("must not run")

    assert _run(engine, search_id, run) == "cancelled"
    record = _record(engine, search_id)
    assert record.attempts == 0 and record.finished_at is not None
