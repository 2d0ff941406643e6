"""Keyword-only data access functions over `SearchRecord`, `PlanRecord` and
`MeasurementRecord`.

State changes of a search are conditional updates (`... WHERE status IN (...)`), so a
cancellation racing a worker's final write has exactly one winner on SQLite and PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, cast

from sqlalchemy import CursorResult, func, update
from sqlmodel import Session, col, select

from app.db.models import (
    ACTIVE_STATUSES,
    MeasurementRecord,
    PlanRecord,
    SearchRecord,
    SearchStatus,
    utcnow,
)


def create_search(
    *,
    session: Session,
    request: dict[str, Any],
    problem: dict[str, Any],
    request_hash: str,
    cost_model_name: str,
    cost_model_version: str,
    progress_total: int | None = None,
) -> SearchRecord:
    """Store a new queued search and return it."""
    record = SearchRecord(
        request=request,
        problem=problem,
        request_hash=request_hash,
        cost_model_name=cost_model_name,
        cost_model_version=cost_model_version,
        progress_total=progress_total,
    )
    session.add(record)
    session.commit()
    session.refresh(record)
    return record


def get_search(*, session: Session, search_id: str) -> SearchRecord | None:
    """One search, or None."""
    return session.get(SearchRecord, search_id)


def list_searches(
    *, session: Session, limit: int, offset: int, status: str | None = None
) -> tuple[list[SearchRecord], int]:
    """A page of searches, newest first, and the total count."""
    query = select(SearchRecord)
    count = select(func.count()).select_from(SearchRecord)
    if status is not None:
        query = query.where(col(SearchRecord.status) == status)
        count = count.where(col(SearchRecord.status) == status)
    query = query.order_by(col(SearchRecord.created_at).desc(), col(SearchRecord.id).desc())
    rows = list(session.exec(query.offset(offset).limit(limit)).all())
    total = int(session.exec(count).one())
    return rows, total


def searches_with_status(*, session: Session, statuses: Sequence[str]) -> list[SearchRecord]:
    """Every search in one of `statuses`, oldest first."""
    query = (
        select(SearchRecord)
        .where(col(SearchRecord.status).in_(list(statuses)))
        .order_by(col(SearchRecord.created_at))
    )
    return list(session.exec(query).all())


def _update(session: Session, search_id: str, statuses: Sequence[str], **values: Any) -> bool:
    statement = (
        update(SearchRecord)
        .where(col(SearchRecord.id) == search_id, col(SearchRecord.status).in_(list(statuses)))
        .values(**values)
    )
    result = cast(CursorResult[Any], session.execute(statement))
    return result.rowcount == 1


def start_search(*, session: Session, search_id: str, now: datetime | None = None) -> bool:
    """queued → running (attempts + 1). False when the search is no longer queued."""
    changed = _update(
        session,
        search_id,
        [SearchStatus.QUEUED.value],
        status=SearchStatus.RUNNING.value,
        started_at=now or utcnow(),
        finished_at=None,
        attempts=SearchRecord.attempts + 1,
    )
    session.commit()
    return changed


def update_progress(
    *, session: Session, search_id: str, evaluated: int, total: int | None
) -> str | None:
    """Write progress of a running search; returns the search's current status."""
    values: dict[str, Any] = {"progress_evaluated": evaluated}
    if total is not None:
        values["progress_total"] = total
    _update(session, search_id, [SearchStatus.RUNNING.value], **values)
    session.commit()
    return current_status(session=session, search_id=search_id)


def current_status(*, session: Session, search_id: str) -> str | None:
    """The stored status, read fresh from the database."""
    query = select(SearchRecord.status).where(col(SearchRecord.id) == search_id)
    return session.exec(query).first()


def finish_search(
    *,
    session: Session,
    search_id: str,
    status: SearchStatus,
    stats: dict[str, Any] | None,
    error: dict[str, Any] | None = None,
    plans: Sequence[PlanRecord] = (),
    progress_evaluated: int | None = None,
    progress_total: int | None = None,
) -> str | None:
    """Store the outcome and the plans in one transaction.

    A running search takes `status`; a search cancelled meanwhile stays cancelled but keeps
    the plans found before the cancel. Returns the final status (None: search deleted)."""
    values: dict[str, Any] = {"stats": stats, "error": error, "finished_at": utcnow()}
    if progress_evaluated is not None:
        values["progress_evaluated"] = progress_evaluated
    if progress_total is not None:
        values["progress_total"] = progress_total
    if _update(session, search_id, [SearchStatus.RUNNING.value], status=status.value, **values):
        final: str | None = status.value
    elif _update(session, search_id, [SearchStatus.CANCELLED.value], **values):
        final = SearchStatus.CANCELLED.value
    else:
        session.rollback()
        return current_status(session=session, search_id=search_id)
    if final != SearchStatus.FAILED.value:
        session.add_all(plans)
    session.commit()
    return final


def cancel_search(*, session: Session, search_id: str) -> bool:
    """queued/running → cancelled. False when the search has already finished."""
    changed = _update(
        session,
        search_id,
        ACTIVE_STATUSES,
        status=SearchStatus.CANCELLED.value,
    )
    session.commit()
    return changed


def mark_cancelled_finished(*, session: Session, search_id: str) -> None:
    """Stamp finished_at on a cancelled search that never ran."""
    _update(session, search_id, [SearchStatus.CANCELLED.value], finished_at=utcnow())
    session.commit()


def requeue_search(*, session: Session, search_id: str, forget_attempt: bool = False) -> bool:
    """running → queued (a service restart or shutdown interrupted it)."""
    values: dict[str, Any] = {"status": SearchStatus.QUEUED.value, "started_at": None}
    if forget_attempt:
        values["attempts"] = SearchRecord.attempts - 1
    changed = _update(session, search_id, [SearchStatus.RUNNING.value], **values)
    session.commit()
    return changed


def fail_search(*, session: Session, search_id: str, error: dict[str, Any]) -> bool:
    """queued/running → failed with `error` (a problem JSON)."""
    changed = _update(
        session,
        search_id,
        ACTIVE_STATUSES,
        status=SearchStatus.FAILED.value,
        error=error,
        finished_at=utcnow(),
    )
    session.commit()
    return changed


def list_plans(
    *, session: Session, search_id: str, limit: int, offset: int = 0
) -> tuple[list[PlanRecord], int]:
    """A search's plans, best first, and their total count."""
    query = (
        select(PlanRecord)
        .where(col(PlanRecord.search_id) == search_id)
        .order_by(col(PlanRecord.rank))
        .offset(offset)
        .limit(limit)
    )
    count = select(func.count()).select_from(PlanRecord).where(col(PlanRecord.search_id) == search_id)
    return list(session.exec(query).all()), int(session.exec(count).one())


def get_plan(*, session: Session, plan_id: str) -> PlanRecord | None:
    """One plan, or None."""
    return session.get(PlanRecord, plan_id)


def create_measurement(
    *,
    session: Session,
    plan: PlanRecord,
    accelerator_id: str,
    step_time_s: float,
    tokens_per_s: float,
    predicted_step_time_s: float,
    peak_memory_gib: float | list[float] | None = None,
    notes: str | None = None,
    measured_at: datetime | None = None,
) -> MeasurementRecord:
    """Store a measured run of `plan` and return it."""
    record = MeasurementRecord(
        plan_id=plan.id,
        search_id=plan.search_id,
        accelerator_id=accelerator_id,
        step_time_s=step_time_s,
        tokens_per_s=tokens_per_s,
        peak_memory_gib=peak_memory_gib,
        notes=notes,
        measured_at=measured_at,
        predicted_step_time_s=predicted_step_time_s,
    )
    session.add(record)
    session.commit()
    session.refresh(record)
    return record


def list_measurements(
    *, session: Session, plan_id: str, limit: int = 100, offset: int = 0
) -> tuple[list[MeasurementRecord], int]:
    """A plan's measurements, oldest first, and their total count."""
    query = (
        select(MeasurementRecord)
        .where(col(MeasurementRecord.plan_id) == plan_id)
        .order_by(col(MeasurementRecord.created_at), col(MeasurementRecord.id))
        .offset(offset)
        .limit(limit)
    )
    count = (
        select(func.count())
        .select_from(MeasurementRecord)
        .where(col(MeasurementRecord.plan_id) == plan_id)
    )
    return list(session.exec(query).all()), int(session.exec(count).one())


def calibration_rows(
    *, session: Session, accelerator_id: str
) -> list[tuple[MeasurementRecord, PlanRecord, SearchRecord]]:
    """Every measurement taken on `accelerator_id` with its plan and search, in a stable
    order (by id), for fitting the calibrated cost model."""
    query = (
        select(MeasurementRecord, PlanRecord, SearchRecord)
        .join(PlanRecord, col(PlanRecord.id) == col(MeasurementRecord.plan_id))
        .join(SearchRecord, col(SearchRecord.id) == col(PlanRecord.search_id))
        .where(col(MeasurementRecord.accelerator_id) == accelerator_id)
        .order_by(col(MeasurementRecord.id))
    )
    return [(m, p, s) for m, p, s in session.exec(query).all()]
