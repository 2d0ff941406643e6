"""Who is asking: API keys, tenants and scopes, as FastAPI dependencies.

- `MESHPLAN_AUTH=on`: tenant data needs `Authorization: Bearer <key>` (RFC 6750). The key
  is a stored API key (`app.db.api_keys`, looked up by SHA-256, revoked keys refused at
  once) or the bootstrap `MESHPLAN_ADMIN_KEY` (compared in constant time; admin of
  `MESHPLAN_ADMIN_TENANT`). Missing, unknown or revoked: 401 with `WWW-Authenticate:
  Bearer`; a scope the key lacks: 403. Both are RFC 9457 problems.
- `MESHPLAN_AUTH=off` (default): every request is tenant `default` with every scope.
- Scopes: `read` (GET), `write` (also submit, cancel, measure), `admin` (also manage keys of
  every tenant); a scope implies those before it.
- Every authenticated request also takes a token from its client's rate bucket
  (`app.api.limits`): the key id, or with auth off the client address.
- Open without a key: health, `/docs`, `/openapi.json` and the catalog reads (hardware,
  models, engines, frameworks: public reference data, no tenant's)."""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlmodel import Session
from starlette.concurrency import run_in_threadpool

from app.api.limits import RateBuckets, RateLimited, RedisTokenBuckets, TokenBuckets
from app.core.config import Settings
from app.db import api_keys
from app.db.models import DEFAULT_TENANT, ApiKeyScope
from specs.errors import PlannerError

ALL_SCOPES = frozenset(s.value for s in ApiKeyScope)
BOOTSTRAP_KEY_ID = "bootstrap"
"""`key_id` of requests made with `MESHPLAN_ADMIN_KEY`."""

bearer_scheme = HTTPBearer(
    auto_error=False,
    scheme_name="ApiKey",
    description="An API key (`meshplan keys create`) as `Authorization: Bearer mp_…`; "
    "needed when the service runs with MESHPLAN_AUTH=on.",
)


class Unauthorized(PlannerError):
    """No usable key (401, with `WWW-Authenticate: Bearer`, RFC 6750 §3)."""

    problem_type = "unauthorized"
    title = "Unauthorized"
    status = 401

    def __init__(self, detail: str, *, error: str = "invalid_token") -> None:
        super().__init__(detail)
        self.headers = {"WWW-Authenticate": f'Bearer realm="meshplan", error="{error}"'}


class Forbidden(PlannerError):
    """The key lacks the scope the request needs (403)."""

    problem_type = "insufficient-scope"
    title = "Forbidden"
    status = 403


@dataclass(frozen=True)
class Principal:
    """The tenant a request acts for, the scopes it holds and the key it came with."""

    tenant: str
    scopes: frozenset[str]
    key_id: str | None

    def has(self, scope: str) -> bool:
        return scope in self.scopes


def rate_buckets(settings: Settings) -> RateBuckets:
    """Shared buckets in Redis when `rate_limit_redis_url` is set, else this process's."""
    if settings.rate_limit_redis_url:
        return RedisTokenBuckets(
            settings.rate_limit_redis_url, settings.rate_limit_per_s, settings.rate_limit_burst
        )
    return TokenBuckets(settings.rate_limit_per_s, settings.rate_limit_burst)


def _resolve(request: Request, credentials: HTTPAuthorizationCredentials | None) -> Principal:
    settings: Settings = request.app.state.settings
    if settings.auth == "off":
        return Principal(DEFAULT_TENANT, ALL_SCOPES, None)
    if credentials is None or not credentials.credentials:
        raise Unauthorized(
            "this service needs an API key: send Authorization: Bearer <key>",
            error="invalid_request",
        )
    secret = credentials.credentials
    admin = settings.admin_key.get_secret_value() if settings.admin_key else ""
    if admin and hmac.compare_digest(secret.encode(), admin.encode()):
        return Principal(settings.admin_tenant, ALL_SCOPES, BOOTSTRAP_KEY_ID)
    with Session(request.app.state.engine, expire_on_commit=False) as session:
        record = api_keys.find_live_key(session=session, secret=secret)
        if record is None:
            raise Unauthorized("the API key is unknown or revoked")
        api_keys.touch_key(session=session, record=record)
    return Principal(record.tenant, frozenset(record.scopes), record.id)


def _limit(request: Request, principal: Principal) -> None:
    buckets: RateBuckets = request.app.state.rate_buckets
    client = principal.key_id or f"addr:{request.client.host if request.client else '?'}"
    wait = buckets.take(client)
    if wait > 0:
        raise RateLimited(
            f"more than {buckets.rate:g} requests a second (burst {buckets.burst:g}) from "
            "this client; retry after Retry-After seconds",
            retry_after_s=wait,
        )


def require(scope: ApiKeyScope) -> Callable[..., Awaitable[Principal]]:
    """A dependency: the request's principal, which must hold `scope` (401 / 403 / 429)."""

    def resolve_and_limit(
        request: Request, credentials: HTTPAuthorizationCredentials | None
    ) -> Principal:
        principal = _resolve(request, credentials)
        _limit(request, principal)
        return principal

    async def dependency(
        request: Request,
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer_scheme)],
    ) -> Principal:
        settings: Settings = request.app.state.settings
        if settings.auth == "off" and not settings.rate_limit_redis_url:
            # nothing to look up: no thread hop (a sync dependency costs one per request)
            principal = resolve_and_limit(request, credentials)
        else:  # a key lookup in the database or a take in Redis: blocking I/O
            principal = await run_in_threadpool(resolve_and_limit, request, credentials)
        if not principal.has(scope.value):
            raise Forbidden(
                f"this key (tenant {principal.tenant!r}) lacks the {scope.value!r} scope",
                required_scope=scope.value,
                scopes=sorted(principal.scopes),
            )
        return principal

    dependency.__name__ = f"require_{scope.value}"
    return dependency


Reader = Annotated[Principal, Depends(require(ApiKeyScope.READ))]
Writer = Annotated[Principal, Depends(require(ApiKeyScope.WRITE))]
Admin = Annotated[Principal, Depends(require(ApiKeyScope.ADMIN))]


LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})


def is_loopback_host(host: str) -> bool:
    """Whether a bind address only listens on loopback (127.0.0.0/8, ::1, `localhost`)."""
    name = host.strip().strip("[]").lower()
    if name in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False  # a host name other than localhost: assume it is reachable


def open_bind_refusal(settings: Settings, host: str) -> str | None:
    """Why the service must not start on `host` (None: it may): with auth off anyone who
    reaches a non-loopback port acts as tenant `default` with every scope, so that needs
    `MESHPLAN_ALLOW_OPEN=1` (or `MESHPLAN_AUTH=on`)."""
    if settings.auth == "on" or settings.allow_open or is_loopback_host(host):
        return None
    return (
        f"refusing to serve on {host!r} with MESHPLAN_AUTH=off: anyone reaching it could read, "
        "submit and cancel every search. Set MESHPLAN_AUTH=on (and MESHPLAN_ADMIN_KEY), bind "
        "127.0.0.1, or set MESHPLAN_ALLOW_OPEN=1 to serve it open anyway."
    )
