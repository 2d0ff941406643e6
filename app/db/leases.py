"""Search leases: which replica runs a search, until when (`SearchRecord.lease_owner`,
`.lease_expires_at`, revision 0005).

A replica claims a queued search nobody holds (no owner, or a lease that has passed) with a
conditional UPDATE whose WHERE repeats the claimable condition, so of two replicas racing for
one row exactly one sees `rowcount == 1`. On PostgreSQL the scan selects its candidates with
`FOR UPDATE SKIP LOCKED` first, so replicas scanning at once take different rows instead of
queueing on each other's row locks (SQLite has no row locks: the database-wide write lock
serialises the UPDATEs, and the condition alone decides). A running search whose lease has
passed belongs to a dead replica: taking it over moves it back to `queued` under the new
owner (its attempt stays counted), or fails it once it has had `max_attempts` runs.
Times are the replicas' UTC clocks: keep them in sync (NTP) to well under `lease_s`.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import CursorResult, and_, or_, update
from sqlmodel import Session, col, select

from app.db.models import SearchRecord, SearchStatus, utcnow

QUEUED, RUNNING = SearchStatus.QUEUED.value, SearchStatus.RUNNING.value


def new_replica_id() -> str:
    """hostname-pid-random: unique per process start, readable in the database."""
    return f"{socket.gethostname()[:60]}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def _free(owner: str, now: datetime) -> Any:
    """Nobody else holds the lease: no owner, `owner` itself, or a lease that has passed."""
    return or_(
        col(SearchRecord.lease_owner).is_(None),
        col(SearchRecord.lease_owner) == owner,
        col(SearchRecord.lease_expires_at) < now,
    )


def _claimable(owner: str, now: datetime, exclude: Collection[str] = ()) -> Any:
    queued = and_(col(SearchRecord.status) == QUEUED, _free(owner, now))
    # a running search of this very owner that it does not run any more (a restart with a
    # fixed replica id, a lost worker) is taken back like a dead replica's
    running = and_(col(SearchRecord.status) == RUNNING, _free(owner, now))
    condition = or_(queued, running)
    if exclude:
        condition = and_(condition, col(SearchRecord.id).not_in(list(exclude)))
    return condition


def _rowcount(session: Session, statement: Any) -> int:
    return cast(CursorResult[Any], session.execute(statement)).rowcount


def claim(*, session: Session, search_id: str, owner: str, lease_s: float) -> bool:
    """Lease one queued search to `owner` (also when it already holds it); False when it is
    not queued or another replica's lease on it is live."""
    now = utcnow()
    statement = (
        update(SearchRecord)
        .where(
            col(SearchRecord.id) == search_id,
            col(SearchRecord.status) == QUEUED,
            _free(owner, now),
        )
        .values(lease_owner=owner, lease_expires_at=now + timedelta(seconds=lease_s))
    )
    changed = _rowcount(session, statement) == 1
    session.commit()
    return changed


@dataclass
class ScanResult:
    claimed: list[str] = field(default_factory=list)
    """Searches now queued under this owner (submit them)."""
    exhausted: list[tuple[str, int]] = field(default_factory=list)
    """Running searches of dead replicas that had had `max_attempts` runs: (id, attempts),
    to be failed."""


def claim_available(
    *,
    session: Session,
    owner: str,
    lease_s: float,
    limit: int,
    max_attempts: int,
    exclude: Collection[str] = (),
) -> ScanResult:
    """Claim up to `limit` searches nobody holds, oldest first: queued ones, and running ones
    whose lease has passed (taken over). `exclude`: searches this replica runs now."""
    out = ScanResult()
    if limit <= 0:
        return out
    now = utcnow()
    query = (
        select(SearchRecord.id, SearchRecord.status, SearchRecord.attempts)
        .where(_claimable(owner, now, exclude))
        .order_by(col(SearchRecord.created_at))
        .limit(limit)
        .with_for_update(skip_locked=True)  # rendered on PostgreSQL only
    )
    rows = list(session.exec(query).all())
    until = now + timedelta(seconds=lease_s)
    for search_id, status, attempts in rows:
        where = [col(SearchRecord.id) == search_id, _claimable(owner, now, exclude)]
        if status == RUNNING and attempts >= max_attempts:
            statement = update(SearchRecord).where(*where).values(lease_owner=owner)
            if _rowcount(session, statement) == 1:
                out.exhausted.append((search_id, attempts))
            continue
        statement = (
            update(SearchRecord)
            .where(*where)
            .values(
                status=QUEUED,
                started_at=None,
                lease_owner=owner,
                lease_expires_at=until,
            )
        )
        if _rowcount(session, statement) == 1:
            out.claimed.append(search_id)
    session.commit()
    return out


def renew(*, session: Session, owner: str, search_ids: Collection[str], lease_s: float) -> int:
    """Push the leases `owner` still holds on `search_ids` forward; returns how many."""
    if not search_ids:
        return 0
    statement = (
        update(SearchRecord)
        .where(
            col(SearchRecord.id).in_(list(search_ids)),
            col(SearchRecord.lease_owner) == owner,
            col(SearchRecord.status).in_([QUEUED, RUNNING]),
        )
        .values(lease_expires_at=utcnow() + timedelta(seconds=lease_s))
    )
    renewed = _rowcount(session, statement)
    session.commit()
    return renewed


def release(*, session: Session, owner: str) -> int:
    """Give up `owner`'s leases (a clean shutdown): its queued searches are free at once and
    its running ones (Ray tasks stopped mid-run) go back to queued, their attempt forgotten."""
    free = {"lease_owner": None, "lease_expires_at": None}
    queued = (
        update(SearchRecord)
        .where(col(SearchRecord.lease_owner) == owner, col(SearchRecord.status) == QUEUED)
        .values(**free)
    )
    running = (
        update(SearchRecord)
        .where(col(SearchRecord.lease_owner) == owner, col(SearchRecord.status) == RUNNING)
        .values(status=QUEUED, started_at=None, attempts=SearchRecord.attempts - 1, **free)
    )
    released = _rowcount(session, queued) + _rowcount(session, running)
    session.commit()
    return released
