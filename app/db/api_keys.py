"""Data access for API keys (`ApiKeyRecord`): make a key (its secret is returned once and
only its SHA-256 is stored), find the live key of a presented secret, list and revoke."""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from sqlalchemy import CursorResult, or_, update
from sqlmodel import Session, col, select

from app.db.models import ApiKeyRecord, ApiKeyScope, utcnow

LAST_USED_RESOLUTION_S = 60.0
"""`last_used_at` is written at most once a minute per key: exact enough to find unused
keys, and a busy key does not turn every request into a database write."""

SECRET_PREFIX = "mp_"
"""Every secret starts with this, so a leaked key is recognisable (secret scanners)."""
PREFIX_SHOWN = 10
"""Characters of the secret kept in clear (`mp_` and 7 random ones) to tell keys apart."""


def hash_secret(secret: str) -> str:
    """Hex SHA-256 of a secret. A fast hash suffices: secrets are 256-bit random tokens
    (`secrets.token_urlsafe(32)`), out of reach of guessing whatever the hash speed."""
    return hashlib.sha256(secret.encode("utf-8", errors="surrogatepass")).hexdigest()


def normalise_scopes(scopes: Iterable[str]) -> list[str]:
    """The scopes a key holds, implied ones included (admin ⊃ write ⊃ read), in that order.

    Raises:
        ValueError: an unknown scope."""
    held = {ApiKeyScope(s).value for s in scopes}
    if ApiKeyScope.ADMIN.value in held:
        held.add(ApiKeyScope.WRITE.value)
    if ApiKeyScope.WRITE.value in held:
        held.add(ApiKeyScope.READ.value)
    return [s.value for s in ApiKeyScope if s.value in held]


def create_key(
    *, session: Session, tenant: str, scopes: Iterable[str], name: str | None = None
) -> tuple[ApiKeyRecord, str]:
    """Store a new key of `tenant`; returns the row and the secret (never stored)."""
    secret = SECRET_PREFIX + secrets.token_urlsafe(32)
    record = ApiKeyRecord(
        tenant=tenant,
        name=name,
        prefix=secret[:PREFIX_SHOWN],
        key_hash=hash_secret(secret),
        scopes=normalise_scopes(scopes),
    )
    session.add(record)
    session.commit()
    session.refresh(record)
    return record, secret


def find_live_key(*, session: Session, secret: str) -> ApiKeyRecord | None:
    """The unrevoked key whose secret this is, or None (looked up by hash: the database
    index compares hashes, so the secret itself is never compared byte by byte)."""
    query = select(ApiKeyRecord).where(
        col(ApiKeyRecord.key_hash) == hash_secret(secret), col(ApiKeyRecord.revoked_at).is_(None)
    )
    return session.exec(query.execution_options(populate_existing=True)).first()


def touch_key(*, session: Session, record: ApiKeyRecord, now: datetime | None = None) -> bool:
    """Record that `record` was used now, unless `last_used_at` is already less than
    `LAST_USED_RESOLUTION_S` old (conditional UPDATE, so concurrent requests of one key
    write it once). True when written."""
    now = now or utcnow()
    last = record.last_used_at
    if last is not None:
        last = last if last.tzinfo else last.replace(tzinfo=UTC)
        if (now - last).total_seconds() < LAST_USED_RESOLUTION_S:
            return False
    cutoff = now - timedelta(seconds=LAST_USED_RESOLUTION_S)
    statement = (
        update(ApiKeyRecord)
        .where(
            col(ApiKeyRecord.id) == record.id,
            or_(col(ApiKeyRecord.last_used_at).is_(None), col(ApiKeyRecord.last_used_at) < cutoff),
        )
        .values(last_used_at=now)
        .execution_options(synchronize_session=False)
    )
    written = cast(CursorResult[Any], session.execute(statement)).rowcount == 1
    session.commit()
    return written


def list_keys(*, session: Session, tenant: str | None = None) -> list[ApiKeyRecord]:
    """Keys (of `tenant`, or of every tenant), oldest first, revoked ones included."""
    query = select(ApiKeyRecord)
    if tenant is not None:
        query = query.where(col(ApiKeyRecord.tenant) == tenant)
    query = query.order_by(col(ApiKeyRecord.created_at), col(ApiKeyRecord.id))
    return list(session.exec(query).all())


def get_key(*, session: Session, key_id: str) -> ApiKeyRecord | None:
    return session.get(ApiKeyRecord, key_id)


def revoke_key(*, session: Session, key_id: str) -> bool:
    """Revoke a key (from now on it answers 401). False when there is no such live key."""
    statement = (
        update(ApiKeyRecord)
        .where(col(ApiKeyRecord.id) == key_id, col(ApiKeyRecord.revoked_at).is_(None))
        .values(revoked_at=utcnow())
        .execution_options(synchronize_session=False)
    )
    changed = cast(CursorResult[Any], session.execute(statement)).rowcount == 1
    session.commit()
    return changed
