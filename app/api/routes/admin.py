"""Key management (`/v1/admin/api-keys`, admin scope) and `GET /v1/whoami` (any key).

An admin key manages the keys of every tenant. The secret of a new key is in the creation
answer only; listings show its first characters (`prefix`)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query, Response, status
from pydantic import BaseModel, ConfigDict, Field

from app.api.auth import Admin, Reader
from app.api.deps import SessionDep, SettingsDep
from app.api.params import KeyId
from app.db import api_keys
from app.db.models import TENANT_MAX_LENGTH, ApiKeyRecord, ApiKeyScope
from specs.errors import NotFound

router = APIRouter(tags=["keys"])

TENANT_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
"""Tenant names: letters, digits, `.`, `_`, `-` (safe in logs, URLs and shells)."""


class WhoAmI(BaseModel):
    """Who the request acts as."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    tenant: str
    """The tenant whose searches, plans and measurements the request sees (`default` with
    auth off)."""
    scopes: list[str]
    """The key's scopes, `read`, `write`, `admin` (each implies those before it)."""
    key_id: str | None = Field(
        description="The id of the key the request came with; null with auth off; "
        "`bootstrap` for the `MESHPLAN_ADMIN_KEY`."
    )
    auth: bool = Field(description="Whether the service checks keys (MESHPLAN_AUTH=on).")


class ApiKeyCreate(BaseModel):
    """A new API key."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    tenant: str = Field(min_length=1, max_length=TENANT_MAX_LENGTH, pattern=TENANT_PATTERN)
    """The tenant the key acts for: letters, digits, `.`, `_`, `-` (a tenant exists as soon
    as a key names it)."""
    scopes: list[ApiKeyScope] = Field(min_length=1, max_length=3)
    """What the key may do: `read` (GET), `write` (read + submit, cancel, measure, delete its
    tenant's data), `admin` (write + manage keys of every tenant)."""
    name: str | None = Field(default=None, max_length=200)
    """A label for people (which job or person holds the key); null: none."""


class ApiKeyPublic(BaseModel):
    """An API key without its secret."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    id: str
    """The key's id (a UUID): `DELETE /v1/admin/api-keys/{id}` revokes it."""
    tenant: str
    """The tenant the key acts for."""
    name: str | None
    """The label given at creation; null: none."""
    prefix: str
    """The secret's first 10 characters (`mp_` and 7 more), to tell keys apart."""
    scopes: list[str]
    """The key's scopes, `read`, `write`, `admin` (each implies those before it)."""
    created_at: datetime
    """When the key was made (RFC 3339, UTC)."""
    revoked_at: datetime | None
    """When the key was revoked (RFC 3339, UTC); null while it is valid."""
    last_used_at: datetime | None = Field(
        default=None,
        description="When the key last authenticated a request (to the minute: written at "
        "most once a minute per key); null if never.",
    )


class ApiKeyCreated(ApiKeyPublic):
    key: str = Field(
        description="The key itself (send it as `Authorization: Bearer <key>`): shown once, "
        "store it now."
    )
    secret: str = Field(description="The same as `key` (kept for clients that read it).")


class ApiKeyList(BaseModel):
    model_config = ConfigDict(use_attribute_docstrings=True)

    items: list[ApiKeyPublic]
    """The keys, oldest first, revoked ones included."""
    total: int
    """Number of keys listed."""


def _utc(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def key_public(record: ApiKeyRecord) -> dict[str, Any]:
    return {
        "id": record.id,
        "tenant": record.tenant,
        "name": record.name,
        "prefix": record.prefix,
        "scopes": list(record.scopes),
        "created_at": _utc(record.created_at),
        "revoked_at": _utc(record.revoked_at),
        "last_used_at": _utc(record.last_used_at),
    }


@router.get("/v1/whoami", response_model=WhoAmI)
def whoami(principal: Reader, settings: SettingsDep) -> dict[str, Any]:
    """The tenant, scopes and key id the request acts with."""
    return {
        "tenant": principal.tenant,
        "scopes": sorted(principal.scopes, key=[s.value for s in ApiKeyScope].index),
        "key_id": principal.key_id,
        "auth": settings.auth == "on",
    }


@router.post(
    "/v1/admin/api-keys", response_model=ApiKeyCreated, status_code=status.HTTP_201_CREATED
)
def create_api_key(
    body: ApiKeyCreate, response: Response, session: SessionDep, _admin: Admin
) -> dict[str, Any]:
    """Make an API key for a tenant (admin scope); the answer holds the secret, once."""
    record, secret = api_keys.create_key(
        session=session, tenant=body.tenant, scopes=[s.value for s in body.scopes], name=body.name
    )
    response.headers["Location"] = f"/v1/admin/api-keys/{record.id}"
    return {**key_public(record), "key": secret, "secret": secret}


@router.get("/v1/admin/api-keys", response_model=ApiKeyList)
def list_api_keys(
    session: SessionDep,
    _admin: Admin,
    tenant: Annotated[
        str | None, Query(description="Only this tenant's keys (default: every tenant's).")
    ] = None,
) -> dict[str, Any]:
    """List API keys of every tenant (or of `?tenant=`), revoked ones included."""
    items = [key_public(r) for r in api_keys.list_keys(session=session, tenant=tenant)]
    return {"items": items, "total": len(items)}


@router.delete("/v1/admin/api-keys/{key_id}", response_model=ApiKeyPublic)
def revoke_api_key(key_id: KeyId, session: SessionDep, _admin: Admin) -> dict[str, Any]:
    """Revoke an API key: from the next request on it answers 401."""
    if not api_keys.revoke_key(session=session, key_id=key_id):
        record = api_keys.get_key(session=session, key_id=key_id)
        if record is None:
            raise NotFound(f"no API key with id {key_id!r}", id=key_id)
    record = api_keys.get_key(session=session, key_id=key_id)
    assert record is not None
    session.refresh(record)
    return key_public(record)
