"""Keyword-only data access functions over `SearchRecord`, `PlanRecord`,
`MeasurementRecord`, `IdempotencyKeyRecord` and the webhook delivery tables.

State changes of a search are conditional updates (`... WHERE status IN (...)`), so a
cancellation racing a worker's final write has exactly one winner on SQLite and PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, cast

from sqlalchemy import CursorResult, and_, delete, func, insert, or_, update
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select

from app.db.models import (
    ACTIVE_STATUSES,
    DEFAULT_TENANT,
    TERMINAL_STATUSES,
    DeliveryStatus,
    IdempotencyKeyRecord,
    MeasurementRecord,
    PlanRecord,
    SearchRecord,
    SearchStatus,
    WebhookAttemptRecord,
    WebhookDeliveryRecord,
    utcnow,
)

DEDUPLICABLE_STATUSES = (
    SearchStatus.QUEUED.value,
    SearchStatus.RUNNING.value,
    SearchStatus.SUCCEEDED.value,
)
"""A stored search in one of these states answers an identical request."""


def create_search(
    *,
    session: Session,
    request: dict[str, Any],
    problem: dict[str, Any],
    request_hash: str,
    cost_model_name: str,
    cost_model_version: str,
    progress_total: int | None = None,
    idempotency_key: str | None = None,
    body_hash: str | None = None,
    callback_url: str | None = None,
    tenant: str = DEFAULT_TENANT,
) -> SearchRecord:
    """Store a new queued search of `tenant` and return it.

    With `idempotency_key`, the key row (with `body_hash`) and, with `callback_url`, the
    search's webhook delivery are stored in the same transaction. When another request
    stored the key first the transaction is rolled back (no search is stored) and
    `IntegrityError` propagates: read the winner with `get_idempotency_key`."""
    record = SearchRecord(
        tenant=tenant,
        request=request,
        problem=problem,
        request_hash=request_hash,
        cost_model_name=cost_model_name,
        cost_model_version=cost_model_version,
        progress_total=progress_total,
    )
    session.add(record)
    if callback_url is not None:
        session.add(WebhookDeliveryRecord(search_id=record.id, url=callback_url))
    try:
        if idempotency_key is not None:
            session.flush()  # the search row first: the key row references it
            _insert_key(session, tenant, idempotency_key, record.id, body_hash or "")
        session.commit()
    except IntegrityError:
        session.rollback()
        raise
    session.refresh(record)
    return record


def find_duplicate(
    *, session: Session, request_hash: str, tenant: str = DEFAULT_TENANT
) -> SearchRecord | None:
    """The newest queued, running or succeeded search of `tenant` with this request hash,
    or None (a tenant is never answered with another tenant's search)."""
    query = (
        select(SearchRecord)
        .where(
            col(SearchRecord.tenant) == tenant,
            col(SearchRecord.request_hash) == request_hash,
            col(SearchRecord.status).in_(list(DEDUPLICABLE_STATUSES)),
        )
        .order_by(col(SearchRecord.created_at).desc(), col(SearchRecord.id).desc())
        .limit(1)
    )
    return session.exec(query).first()


def get_idempotency_key(
    *, session: Session, key: str, tenant: str = DEFAULT_TENANT
) -> IdempotencyKeyRecord | None:
    """The stored row of a tenant's idempotency key, read fresh, or None."""
    query = select(IdempotencyKeyRecord).where(
        col(IdempotencyKeyRecord.tenant) == tenant, col(IdempotencyKeyRecord.key) == key
    )
    return session.exec(query.execution_options(populate_existing=True)).first()


def claim_idempotency_key(
    *, session: Session, key: str, search_id: str, body_hash: str, tenant: str = DEFAULT_TENANT
) -> IdempotencyKeyRecord:
    """Store `key` → `search_id`; when the key is already stored (a concurrent request won),
    return the stored row instead (its search and body hash may differ)."""
    try:
        _insert_key(session, tenant, key, search_id, body_hash)
        session.commit()
    except IntegrityError:
        session.rollback()
    row = get_idempotency_key(session=session, key=key, tenant=tenant)
    if row is None:  # the winner's search (and its key) was deleted meanwhile
        raise LookupError(f"idempotency key {key!r} vanished")
    return row


def _insert_key(session: Session, tenant: str, key: str, search_id: str, body_hash: str) -> None:
    """A Core INSERT: a duplicate key fails in the database (the unique constraint decides
    races), whatever rows this session has loaded."""
    session.execute(
        insert(IdempotencyKeyRecord).values(
            tenant=tenant, key=key, search_id=search_id, body_hash=body_hash, created_at=utcnow()
        )
    )


def page_after_search(created_at: datetime, search_id: str) -> Any:
    """Keyset condition: rows after (`created_at`, `search_id`) in newest-first order."""
    return or_(
        col(SearchRecord.created_at) < created_at,
        and_(col(SearchRecord.created_at) == created_at, col(SearchRecord.id) < search_id),
    )


def get_search(
    *, session: Session, search_id: str, tenant: str | None = None
) -> SearchRecord | None:
    """One search, or None; with `tenant`, None as well when another tenant owns it (the
    service's own workers pass no tenant)."""
    record = session.get(SearchRecord, search_id)
    if record is None or (tenant is not None and record.tenant != tenant):
        return None
    return record


def count_searches(*, session: Session, statuses: Sequence[str], tenant: str | None = None) -> int:
    """How many searches (of `tenant`, or of everyone) are in one of `statuses`."""
    count = (
        select(func.count())
        .select_from(SearchRecord)
        .where(col(SearchRecord.status).in_(list(statuses)))
    )
    if tenant is not None:
        count = count.where(col(SearchRecord.tenant) == tenant)
    return int(session.exec(count).one())


def list_searches(
    *,
    session: Session,
    limit: int,
    offset: int,
    status: str | None = None,
    after: tuple[datetime, str] | None = None,
    tenant: str | None = None,
) -> tuple[list[SearchRecord], int]:
    """A page of searches (of `tenant`, when given), newest first (ties by id, descending),
    and the total count.

    `after` = (created_at, id) of the last row of the previous page (keyset pagination:
    rows inserted meanwhile never shift the pages); the total ignores it."""
    query = select(SearchRecord)
    count = select(func.count()).select_from(SearchRecord)
    if tenant is not None:
        query = query.where(col(SearchRecord.tenant) == tenant)
        count = count.where(col(SearchRecord.tenant) == tenant)
    if status is not None:
        query = query.where(col(SearchRecord.status) == status)
        count = count.where(col(SearchRecord.status) == status)
    if after is not None:
        query = query.where(page_after_search(*after))
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


def _update(
    session: Session,
    search_id: str,
    statuses: Sequence[str],
    owner: str | None = None,
    **values: Any,
) -> bool:
    """Conditional update of one search in `statuses` (and leased by `owner` when given)."""
    statement = update(SearchRecord).where(
        col(SearchRecord.id) == search_id, col(SearchRecord.status).in_(list(statuses))
    )
    if owner is not None:
        statement = statement.where(col(SearchRecord.lease_owner) == owner)
    statement = statement.values(**values)
    result = cast(CursorResult[Any], session.execute(statement))
    return result.rowcount == 1


def start_search(
    *, session: Session, search_id: str, now: datetime | None = None, owner: str | None = None
) -> bool:
    """queued → running (attempts + 1). False when the search is no longer queued (or no
    longer leased by `owner`)."""
    changed = _update(
        session,
        search_id,
        [SearchStatus.QUEUED.value],
        owner,
        status=SearchStatus.RUNNING.value,
        started_at=now or utcnow(),
        finished_at=None,
        attempts=SearchRecord.attempts + 1,
    )
    session.commit()
    return changed


def update_progress(
    *, session: Session, search_id: str, evaluated: int, total: int | None, owner: str | None = None
) -> str | None:
    """Write progress of a running search; returns the search's current status
    (`LEASE_LOST` when `owner` no longer holds it)."""
    values: dict[str, Any] = {"progress_evaluated": evaluated}
    if total is not None:
        values["progress_total"] = total
    _update(session, search_id, [SearchStatus.RUNNING.value], owner, **values)
    session.commit()
    return current_status(session=session, search_id=search_id, owner=owner)


LEASE_LOST = "lease_lost"
"""`current_status` of a search another replica has taken over (never stored)."""


def current_status(*, session: Session, search_id: str, owner: str | None = None) -> str | None:
    """The stored status, read fresh from the database; `LEASE_LOST` when `owner` is given
    and no longer holds the search's lease."""
    query = select(SearchRecord.status, SearchRecord.lease_owner).where(
        col(SearchRecord.id) == search_id
    )
    row = session.exec(query).first()
    if row is None:
        return None
    if owner is not None and row[1] != owner:
        return LEASE_LOST
    return row[0]


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
    owner: str | None = None,
) -> str | None:
    """Store the outcome and the plans in one transaction (only while `owner`, when given,
    holds the lease: a replica that lost it writes nothing).

    A running search takes `status`; a search cancelled meanwhile stays cancelled but keeps
    the plans found before the cancel. Returns the final status (None: search deleted)."""
    values: dict[str, Any] = {"stats": stats, "error": error, "finished_at": utcnow()}
    if progress_evaluated is not None:
        values["progress_evaluated"] = progress_evaluated
    if progress_total is not None:
        values["progress_total"] = progress_total
    running, cancelled = [SearchStatus.RUNNING.value], [SearchStatus.CANCELLED.value]
    if _update(session, search_id, running, owner, status=status.value, **values):
        final: str | None = status.value
    elif _update(session, search_id, cancelled, owner, **values):
        final = SearchStatus.CANCELLED.value
    else:
        session.rollback()
        return current_status(session=session, search_id=search_id)
    if final != SearchStatus.FAILED.value:
        session.add_all(plans)
    session.commit()
    return final


def store_pareto(*, session: Session, search_id: str, front: dict[str, Any]) -> bool:
    """Keep a succeeded search's complete Pareto front (`SearchRecord.pareto`)."""
    stored = _update(session, search_id, [SearchStatus.SUCCEEDED.value], pareto=front)
    session.commit()
    return stored


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


def requeue_search(
    *, session: Session, search_id: str, forget_attempt: bool = False, owner: str | None = None
) -> bool:
    """running → queued (a service restart or shutdown interrupted it); the lease is
    released so that any replica may claim it."""
    values: dict[str, Any] = {
        "status": SearchStatus.QUEUED.value,
        "started_at": None,
        "lease_owner": None,
        "lease_expires_at": None,
    }
    if forget_attempt:
        values["attempts"] = SearchRecord.attempts - 1
    changed = _update(session, search_id, [SearchStatus.RUNNING.value], owner, **values)
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
    *,
    session: Session,
    search_id: str,
    limit: int,
    offset: int = 0,
    after_rank: int | None = None,
    include_dominated: bool = True,
) -> tuple[list[PlanRecord], int]:
    """A search's plans, best first, and their total count; `after_rank` keeps only the
    plans ranked after it (keyset pagination); `include_dominated=False` leaves out the
    plans folded under another (`dominated_by` set)."""
    where = [col(PlanRecord.search_id) == search_id]
    if not include_dominated:
        where.append(col(PlanRecord.dominated_by).is_(None))
    query = select(PlanRecord).where(*where)
    if after_rank is not None:
        query = query.where(col(PlanRecord.rank) > after_rank)
    query = query.order_by(col(PlanRecord.rank)).offset(offset).limit(limit)
    count = select(func.count()).select_from(PlanRecord).where(*where)
    return list(session.exec(query).all()), int(session.exec(count).one())


def count_plans_before(
    *, session: Session, search_id: str, rank: int, include_dominated: bool = True
) -> int:
    """How many plans of the search rank before `rank` (with `include_dominated=False`:
    how many non-dominated ones), so that a page of a list can number its plans."""
    where = [col(PlanRecord.search_id) == search_id, col(PlanRecord.rank) < rank]
    if not include_dominated:
        where.append(col(PlanRecord.dominated_by).is_(None))
    return int(session.exec(select(func.count()).select_from(PlanRecord).where(*where)).one())


def plan_counts(*, session: Session, search_ids: Sequence[str]) -> dict[str, int]:
    """How many non-dominated plans each of `search_ids` has stored (what its plan list
    shows by default), in one grouped count (a search with none is absent)."""
    if not search_ids:
        return {}
    query = (
        select(col(PlanRecord.search_id), func.count())
        .where(col(PlanRecord.search_id).in_(list(search_ids)))
        .where(col(PlanRecord.dominated_by).is_(None))
        .group_by(col(PlanRecord.search_id))
    )
    return {search_id: int(count) for search_id, count in session.exec(query).all()}


def get_plan(*, session: Session, plan_id: str, tenant: str | None = None) -> PlanRecord | None:
    """One plan, or None; with `tenant`, None as well when its search is another tenant's."""
    plan = session.get(PlanRecord, plan_id)
    if plan is None or tenant is None:
        return plan
    return plan if get_search(session=session, search_id=plan.search_id, tenant=tenant) else None


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
    tenant: str = DEFAULT_TENANT,
) -> MeasurementRecord:
    """Store a measured run of `plan` by `tenant` and return it."""
    record = MeasurementRecord(
        tenant=tenant,
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


def delete_measurement(
    *, session: Session, measurement_id: str, tenant: str = DEFAULT_TENANT
) -> bool:
    """Delete the measurement `measurement_id` of `tenant`; False when there is none."""
    result = cast(
        CursorResult[Any],
        session.execute(
            delete(MeasurementRecord).where(
                col(MeasurementRecord.id) == measurement_id,
                col(MeasurementRecord.tenant) == tenant,
            )
        ),
    )
    session.commit()
    return bool(result.rowcount)


def list_measurements(
    *,
    session: Session,
    plan_id: str,
    limit: int = 100,
    offset: int = 0,
    tenant: str | None = None,
) -> tuple[list[MeasurementRecord], int]:
    """A plan's measurements (those of `tenant`, when given), oldest first, and their
    total count."""
    where = [col(MeasurementRecord.plan_id) == plan_id]
    if tenant is not None:
        where.append(col(MeasurementRecord.tenant) == tenant)
    query = (
        select(MeasurementRecord)
        .where(*where)
        .order_by(col(MeasurementRecord.created_at), col(MeasurementRecord.id))
        .offset(offset)
        .limit(limit)
    )
    count = select(func.count()).select_from(MeasurementRecord).where(*where)
    return list(session.exec(query).all()), int(session.exec(count).one())


def calibration_rows(
    *, session: Session, accelerator_id: str, tenant: str = DEFAULT_TENANT
) -> list[tuple[MeasurementRecord, PlanRecord, SearchRecord]]:
    """Every measurement `tenant` took on `accelerator_id` with its plan and search, in a
    stable order (by id), for fitting that tenant's calibrated cost model."""
    query = (
        select(MeasurementRecord, PlanRecord, SearchRecord)
        .join(PlanRecord, col(PlanRecord.id) == col(MeasurementRecord.plan_id))
        .join(SearchRecord, col(SearchRecord.id) == col(PlanRecord.search_id))
        .where(
            col(MeasurementRecord.accelerator_id) == accelerator_id,
            col(MeasurementRecord.tenant) == tenant,
        )
        .order_by(col(MeasurementRecord.id))
    )
    return [(m, p, s) for m, p, s in session.exec(query).all()]


# ---- webhook deliveries --------------------------------------------------------------------
def add_delivery(*, session: Session, search_id: str, url: str) -> WebhookDeliveryRecord:
    """Subscribe `url` to the completion of a search (once per URL and search)."""
    query = select(WebhookDeliveryRecord).where(
        col(WebhookDeliveryRecord.search_id) == search_id, col(WebhookDeliveryRecord.url) == url
    )
    existing = session.exec(query).first()
    if existing is not None:
        return existing
    record = WebhookDeliveryRecord(search_id=search_id, url=url)
    session.add(record)
    session.commit()
    session.refresh(record)
    return record


def list_deliveries(
    *, session: Session, search_id: str
) -> list[tuple[WebhookDeliveryRecord, list[WebhookAttemptRecord]]]:
    """A search's deliveries (oldest first), each with its attempts (first first)."""
    deliveries = list(
        session.exec(
            select(WebhookDeliveryRecord)
            .where(col(WebhookDeliveryRecord.search_id) == search_id)
            .order_by(col(WebhookDeliveryRecord.created_at), col(WebhookDeliveryRecord.id))
        ).all()
    )
    if not deliveries:
        return []
    attempts = session.exec(
        select(WebhookAttemptRecord)
        .where(col(WebhookAttemptRecord.delivery_id).in_([d.id for d in deliveries]))
        .order_by(col(WebhookAttemptRecord.number))
    ).all()
    by_delivery: dict[str, list[WebhookAttemptRecord]] = {d.id: [] for d in deliveries}
    for attempt in attempts:
        by_delivery[attempt.delivery_id].append(attempt)
    return [(d, by_delivery[d.id]) for d in deliveries]


def deliveries_to_activate(
    *, session: Session, limit: int = 100
) -> list[tuple[WebhookDeliveryRecord, SearchRecord]]:
    """Waiting deliveries whose search has finished (final status and `finished_at` set)."""
    query = (
        select(WebhookDeliveryRecord, SearchRecord)
        .join(SearchRecord, col(SearchRecord.id) == col(WebhookDeliveryRecord.search_id))
        .where(
            col(WebhookDeliveryRecord.status) == DeliveryStatus.WAITING.value,
            col(SearchRecord.status).in_(list(TERMINAL_STATUSES)),
            col(SearchRecord.finished_at).is_not(None),
        )
        .order_by(col(WebhookDeliveryRecord.created_at))
        .limit(limit)
    )
    return [(d, s) for d, s in session.exec(query).all()]


def activate_delivery(
    *, session: Session, delivery_id: str, event: str, payload: dict[str, Any], now: datetime
) -> bool:
    """waiting → pending, due now, with its event and fixed payload."""
    statement = (
        update(WebhookDeliveryRecord)
        .where(
            col(WebhookDeliveryRecord.id) == delivery_id,
            col(WebhookDeliveryRecord.status) == DeliveryStatus.WAITING.value,
        )
        .values(
            status=DeliveryStatus.PENDING.value, event=event, payload=payload, next_attempt_at=now
        )
        .execution_options(synchronize_session=False)
    )
    changed = cast(CursorResult[Any], session.execute(statement)).rowcount == 1
    session.commit()
    return changed


def due_deliveries(
    *, session: Session, now: datetime, limit: int = 100
) -> list[WebhookDeliveryRecord]:
    """Pending deliveries whose next attempt is due, oldest due first."""
    query = (
        select(WebhookDeliveryRecord)
        .where(
            col(WebhookDeliveryRecord.status) == DeliveryStatus.PENDING.value,
            col(WebhookDeliveryRecord.next_attempt_at) <= now,
        )
        .order_by(col(WebhookDeliveryRecord.next_attempt_at))
        .limit(limit)
    )
    return list(session.exec(query.execution_options(populate_existing=True)).all())


def next_delivery_due(*, session: Session) -> datetime | None:
    """The earliest `next_attempt_at` of a pending delivery."""
    query = select(func.min(WebhookDeliveryRecord.next_attempt_at)).where(
        col(WebhookDeliveryRecord.status) == DeliveryStatus.PENDING.value
    )
    return session.exec(query).one()


def claim_delivery(
    *, session: Session, delivery: WebhookDeliveryRecord, now: datetime, lease_until: datetime
) -> bool:
    """Take a due pending delivery for one attempt: its `next_attempt_at` moves to
    `lease_until` when it is still due and nobody attempted it since it was read (one
    sender per attempt across threads and replicas; a sender that dies leaves it due again
    after the lease)."""
    statement = (
        update(WebhookDeliveryRecord)
        .where(
            col(WebhookDeliveryRecord.id) == delivery.id,
            col(WebhookDeliveryRecord.status) == DeliveryStatus.PENDING.value,
            col(WebhookDeliveryRecord.attempt_count) == delivery.attempt_count,
            col(WebhookDeliveryRecord.next_attempt_at) <= now,
        )
        .values(next_attempt_at=lease_until)
        .execution_options(synchronize_session=False)
    )
    changed = cast(CursorResult[Any], session.execute(statement)).rowcount == 1
    session.commit()
    return changed


def record_attempt(
    *,
    session: Session,
    delivery_id: str,
    number: int,
    attempted_at: datetime,
    duration_s: float,
    status_code: int | None,
    error: str | None,
    next_attempt_at: datetime | None,
) -> str:
    """Store one attempt and the delivery's new state in one transaction: delivered when
    `error` is None, pending again at `next_attempt_at`, or failed when that is None.
    Returns the new delivery status."""
    if error is None:
        status = DeliveryStatus.DELIVERED.value
    elif next_attempt_at is not None:
        status = DeliveryStatus.PENDING.value
    else:
        status = DeliveryStatus.FAILED.value
    session.add(
        WebhookAttemptRecord(
            delivery_id=delivery_id,
            number=number,
            attempted_at=attempted_at,
            duration_s=duration_s,
            status_code=status_code,
            error=error,
        )
    )
    session.execute(
        update(WebhookDeliveryRecord)
        .where(col(WebhookDeliveryRecord.id) == delivery_id)
        .values(
            status=status,
            attempt_count=number,
            next_attempt_at=next_attempt_at,
            delivered_at=utcnow() if error is None else None,
        )
        .execution_options(synchronize_session=False)
    )
    session.commit()
    return status
