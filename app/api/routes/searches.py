"""Plan searches: create (optionally waiting), read, list, cancel and read their plans;
the scheduler-facing parts of the API live here too.

- Tenants (`app.api.auth`): every read and write below sees only the caller's tenant; a
  search of another tenant answers 404, as an unknown id does.
- `Idempotency-Key` on `POST /v1/searches` (at most 255 visible ASCII characters, one
  namespace per tenant, kept forever): the first request stores key → (search, SHA-256
  of the canonical JSON of the validated body) in the transaction that stores the search;
  a later request with the key and an equal body gets that search (answered as a creation
  would be, plus `Idempotent-Replayed: true`), with another body a 409 problem
  (`idempotency-key-reused`). Concurrent requests with one key store one search: the key
  is a primary key, the loser's transaction rolls back and it answers the winner's search.
- Limits (`app.api.limits`): a tenant with `tenant_max_active_searches` queued or running
  searches gets 429, and with `max_queued_searches` queued in all a creation gets 503, both
  with `Retry-After` (replays and deduplicated answers create nothing and pass).
- Deduplication (within the caller's tenant): a request whose resolved problem (`request_hash`: model, cluster,
  workload, constraints, objective, top_k, cost model with its version and config) equals
  a queued, running or succeeded search gets that search at once, with
  `X-Meshplan-Deduplicated: <id>` (and its `callback_url`, if any, is subscribed to that
  search's completion). `?dedupe=false` always creates a new search. Best effort: two
  identical requests racing may both create one (send an Idempotency-Key for exactly-once).
- Status of a creation, a replay or a deduplicated answer alike: `201` when `?wait` > 0
  and the search has finished, else `202`; `Location` names the search.
- `callback_url`: see `app.services.webhooks` and `app.services.webhook_targets` (refused with 422 when the service has no
  `MESHPLAN_WEBHOOK_SECRET`). Deliveries are listed in `GET /v1/searches/{id}` (member
  `deliveries`) and `GET /v1/searches/{id}/deliveries`.
- `GET /v1/searches/{id}/events`: Server-Sent Events (see `search_events`).
- Cursor pagination: `?cursor=` takes the `next_cursor` of the previous page (opaque:
  base64url JSON of the last row's (created_at, id) for searches, newest first; of its rank
  for plans). Keyset pages do not shift when searches are created meanwhile. `offset` still
  works (not together with `cursor`).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import time
import weakref
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Body, Header, Query, Request, Response, status
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session

from app.api.auth import Principal, Reader, Writer
from app.api.deps import MAX_OFFSET, EngineDep, OffsetQuery, RunnerDep, SessionDep, SettingsDep
from app.api.limits import QueueFull, TenantQuotaExceeded
from app.api.offload import run_in_worker
from app.api.params import CursorQuery, PlanId, SearchId, limit_description
from app.api.routes.plans import plan_public
from app.core.config import Settings
from app.db import crud
from app.db.models import (
    ACTIVE_STATUSES,
    IDEMPOTENCY_KEY_MAX_LENGTH,
    TERMINAL_STATUSES,
    IdempotencyKeyRecord,
    SearchRecord,
    SearchStatus,
    WebhookAttemptRecord,
    WebhookDeliveryRecord,
)
from app.examples import SEARCH_EXAMPLES
from app.schemas import (
    DeliveryList,
    ParetoPublic,
    PlanList,
    ReplanRequest,
    SearchCreate,
    SearchList,
    SearchPublic,
)
from app.services import planning
from app.services.replan import prepare_replan
from app.services.runner import SearchRunner
from app.services.webhook_targets import RefusedTarget, check_callback_url
from specs.errors import Conflict, NotFound, SpecError
from specs.plan import canonical_hash

router = APIRouter(tags=["searches"])

IDEMPOTENCY_HEADER = "Idempotency-Key"
REPLAYED_HEADER = "Idempotent-Replayed"
DEDUPLICATED_HEADER = "X-Meshplan-Deduplicated"
_CANCELLED_GRACE_S = 10.0
"""An `/events` stream ends this long after a search turned cancelled even if its worker
never stamped `finished_at` (a crashed worker)."""


class IdempotencyKeyReused(Conflict):
    """An Idempotency-Key sent again with a different request body (409)."""

    problem_type = "idempotency-key-reused"
    title = "Idempotency key reused"


def _utc(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def search_public(record: SearchRecord, *, num_plans: int | None = None) -> dict[str, Any]:
    """A search row as the API shows it."""
    request = record.request or {}
    problem = record.problem or {}
    model = problem.get("model") or {}
    cluster = problem.get("cluster") or {}
    stats = dict(record.stats or {})
    started, finished = _utc(record.started_at), _utc(record.finished_at)
    if "wall_time_s" not in stats:  # queued: 0; running: so far; finished without stats: total
        end = finished or (datetime.now(UTC) if started else None)
        stats["wall_time_s"] = (end - started).total_seconds() if started and end else 0.0
    return {
        "id": record.id,
        "status": record.status,
        "progress": {"evaluated": record.progress_evaluated, "total": record.progress_total},
        "stats": stats,
        "error": record.error,
        "created_at": _utc(record.created_at),
        "started_at": started,
        "finished_at": finished,
        "attempts": record.attempts,
        "objective": problem.get("objective", "max_throughput"),
        "top_k": problem.get("top_k", request.get("top_k", 10)),
        "model": request.get("model", {}),
        "model_name": model.get("name", ""),
        "num_gpus": sum(
            g.get("num_nodes", 0) * g.get("gpus_per_node", 0) for g in cluster.get("groups", [])
        ),
        "cluster": request.get("cluster", {}),
        "workload": problem.get("workload", request.get("workload", {})),
        "constraints": problem.get("constraints", {}),
        "cost_model": {
            "name": record.cost_model_name,
            "version": record.cost_model_version,
            "config": (problem.get("cost_model") or {}).get("config"),
        },
        "num_plans": num_plans,
        "plans_url": f"/v1/searches/{record.id}/plans",
        "calibration": (problem.get("cost_model") or {}).get("calibration"),
        "callback_url": request.get("callback_url"),
        "events_url": f"/v1/searches/{record.id}/events",
    }


def delivery_public(
    delivery: WebhookDeliveryRecord, attempts: list[WebhookAttemptRecord]
) -> dict[str, Any]:
    """A webhook delivery with its attempts, as the API shows it."""
    return {
        "id": delivery.id,
        "search_id": delivery.search_id,
        "url": delivery.url,
        "status": delivery.status,
        "event": delivery.event,
        "attempt_count": delivery.attempt_count,
        "next_attempt_at": _utc(delivery.next_attempt_at),
        "created_at": _utc(delivery.created_at),
        "delivered_at": _utc(delivery.delivered_at),
        "attempts": [
            {
                "number": a.number,
                "attempted_at": _utc(a.attempted_at),
                "duration_s": a.duration_s,
                "status_code": a.status_code,
                "error": a.error,
            }
            for a in attempts
        ],
    }


def _load(session: Session, search_id: str, tenant: str | None) -> SearchRecord:
    """The search, or 404 when it is unknown or another tenant's (`tenant` None: any)."""
    record = crud.get_search(session=session, search_id=search_id, tenant=tenant)
    if record is None:
        raise NotFound(f"no search with id {search_id!r}", id=search_id)
    return record


PLANS_COUNTED = (SearchStatus.SUCCEEDED.value, SearchStatus.CANCELLED.value)
"""The statuses whose `num_plans` is given (a queued, running or failed search has none yet)."""


def _public_with_count(
    session: Session, record: SearchRecord, *, deliveries: bool = False
) -> dict[str, Any]:
    count = None
    if record.status in PLANS_COUNTED:
        count = crud.list_plans(
            session=session, search_id=record.id, limit=0, include_dominated=False
        )[1]
    public = search_public(record, num_plans=count)
    if deliveries:
        public["deliveries"] = [
            delivery_public(d, a)
            for d, a in crud.list_deliveries(session=session, search_id=record.id)
        ]
    return public


def webhook_search_view(session: Session, record: SearchRecord) -> dict[str, Any]:
    """The JSON of a search in a webhook body: what GET /v1/searches/{id} answers, without
    `deliveries`."""
    public = SearchPublic.model_validate(_public_with_count(session, record))
    return public.model_dump(mode="json", exclude={"deliveries"})


def is_complete(record: SearchRecord) -> bool:
    """Final status and `finished_at` stored: nothing about the search changes any more."""
    return record.status in TERMINAL_STATUSES and record.finished_at is not None


# ---- cursors --------------------------------------------------------------------------------
def _encode_cursor(payload: dict[str, Any]) -> str:
    raw = json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_cursor(cursor: str, kind: str) -> dict[str, Any]:
    def invalid() -> SpecError:
        return SpecError(
            "cursor",
            "a next_cursor of a previous page of this list",
            cursor,
            "cursor is not a next_cursor this list returned",
        )

    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        payload = json.loads(raw)
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise invalid() from None
    if not isinstance(payload, dict) or payload.get("k") != kind:
        raise invalid()
    return payload


def search_cursor(record: SearchRecord) -> str:
    created = _utc(record.created_at)
    assert created is not None
    return _encode_cursor({"k": "s", "t": created.isoformat(), "id": record.id})


def _search_after(cursor: str) -> tuple[datetime, str]:
    payload = _decode_cursor(cursor, "s")
    try:
        created = datetime.fromisoformat(str(payload["t"]))
        search_id = payload["id"]
        if not (isinstance(search_id, str) and search_id.isascii() and len(search_id) <= 64):
            raise ValueError("not a search id")
        created = created if created.tzinfo else created.replace(tzinfo=UTC)
        created = created.astimezone(UTC)
    except (KeyError, ValueError, TypeError, OverflowError):
        raise SpecError(
            "cursor",
            "a next_cursor of a previous page of this list",
            cursor,
            "cursor is not a next_cursor this list returned",
        ) from None
    return created, search_id


def _plan_after(cursor: str) -> int:
    rank = _decode_cursor(cursor, "p").get("r")
    if not isinstance(rank, int) or isinstance(rank, bool) or not 0 <= rank <= MAX_OFFSET:
        raise SpecError(
            "cursor",
            "a next_cursor of a previous page of this list",
            cursor,
            "cursor is not a next_cursor this list returned",
        )
    return rank


def _no_offset_with_cursor(cursor: str | None, offset: int) -> None:
    if cursor is not None and offset:
        raise SpecError(
            "offset",
            "0 when cursor is given",
            offset,
            "offset and cursor cannot be combined: the cursor says where the page starts",
        )


# ---- creation ----------------------------------------------------------------------------
def _check_idempotency_key(value: str | None) -> str | None:
    if value is None:
        return None
    if not 1 <= len(value) <= IDEMPOTENCY_KEY_MAX_LENGTH or not all(
        0x21 <= ord(c) <= 0x7E for c in value
    ):
        raise SpecError(
            IDEMPOTENCY_HEADER,
            f"1 to {IDEMPOTENCY_KEY_MAX_LENGTH} visible ASCII characters",
            value[:300],
            f"the {IDEMPOTENCY_HEADER} header must be 1 to {IDEMPOTENCY_KEY_MAX_LENGTH} "
            f"visible ASCII characters (got {len(value)} characters)",
        )
    return value


def _replay(row: IdempotencyKeyRecord, body_hash: str) -> tuple[str, str]:
    if row.body_hash != body_hash:
        raise IdempotencyKeyReused(
            f"the {IDEMPOTENCY_HEADER} {row.key!r} was first sent with another request body "
            f"(search {row.search_id}); send a new key for a new request",
            header=IDEMPOTENCY_HEADER,
            key=row.key,
            search_id=row.search_id,
        )
    return row.search_id, "replayed"


_QUEUE_RETRY_S = 5.0
"""`Retry-After` of a full queue or quota: about how long a small search takes to leave it."""


def _check_capacity(session: Session, settings: Settings, tenant: str) -> None:
    """429 when `tenant` already has its cap of active searches, 503 when the global queue
    is full. Checked before a search is stored; concurrent requests may overshoot a cap by
    the number of requests in flight (at most a few), never without bound."""
    active = crud.count_searches(session=session, statuses=ACTIVE_STATUSES, tenant=tenant)
    if active >= settings.tenant_max_active_searches:
        raise TenantQuotaExceeded(
            f"tenant {tenant!r} has {active} queued or running searches, its limit "
            f"(MESHPLAN_TENANT_MAX_ACTIVE_SEARCHES={settings.tenant_max_active_searches}); "
            "wait for one to finish or cancel one",
            retry_after_s=_QUEUE_RETRY_S,
            limit=settings.tenant_max_active_searches,
        )
    queued = crud.count_searches(session=session, statuses=[SearchStatus.QUEUED.value])
    if queued >= settings.max_queued_searches:
        raise QueueFull(
            f"the service has {queued} queued searches, its limit "
            f"(MESHPLAN_MAX_QUEUED_SEARCHES={settings.max_queued_searches}); retry later",
            retry_after_s=_QUEUE_RETRY_S,
            limit=settings.max_queued_searches,
        )


async def _check_callback_url(url: str, settings: Settings) -> None:
    """422 unless `url` passes the webhook target rules (resolving DNS off the event loop)."""
    try:
        await run_in_threadpool(check_callback_url, url, settings)
    except RefusedTarget as exc:
        raise SpecError("callback_url", exc.rule, url, exc.message) from None


async def _answer(engine: Any, search_id: str, tenant: str, response: Response) -> dict[str, Any]:
    """The stored search as the creation answers it, with its `Location` header."""

    def load() -> dict[str, Any]:
        with Session(engine, expire_on_commit=False) as session:
            return _public_with_count(session, _load(session, search_id, tenant))

    public = await run_in_threadpool(load)
    response.headers["Location"] = f"/v1/searches/{search_id}"
    return public


def _check_wait(wait: float, settings: Settings) -> None:
    """422 unless `?wait` is within 0..max_wait_s."""
    if not 0 <= wait <= settings.max_wait_s:
        raise SpecError(
            "wait",
            f"between 0 and {settings.max_wait_s}",
            wait,
            f"wait must be between 0 and {settings.max_wait_s} seconds (got {wait})",
        )


def _webhooks_notify(request: Request) -> None:
    dispatcher = getattr(request.app.state, "webhooks", None)
    if dispatcher is not None:
        dispatcher.notify()


@router.post(
    "/v1/searches",
    response_model=SearchPublic,
    status_code=status.HTTP_202_ACCEPTED,
    responses={
        201: {"model": SearchPublic, "description": "finished within ?wait"},
        409: {"description": "Idempotency-Key sent before with another body"},
        429: {"description": "rate limit or the tenant's active-search quota (Retry-After)"},
        503: {"description": "the search queue is full (Retry-After)"},
    },
)
async def create_search(
    body: Annotated[SearchCreate, Body(openapi_examples=SEARCH_EXAMPLES)],
    request: Request,
    principal: Writer,
    response: Response,
    settings: SettingsDep,
    engine: EngineDep,
    runner: RunnerDep,
    wait: Annotated[
        float, Query(description="Seconds to block for the result (0..max_wait_s).")
    ] = 0.0,
    dedupe: Annotated[
        bool,
        Query(
            description="Answer an identical queued, running or succeeded search "
            "instead of starting a new one."
        ),
    ] = True,
    idempotency_key: Annotated[
        str | None,
        Header(
            alias=IDEMPOTENCY_HEADER,
            description="Same key and body: the same search; other body: 409.",
        ),
    ] = None,
) -> dict[str, Any]:
    """Start a plan search; `?wait=S` blocks up to S seconds for it to finish."""
    _check_wait(wait, settings)
    key = _check_idempotency_key(idempotency_key)
    if body.callback_url is not None and settings.webhook_secret is None:
        raise SpecError(
            "callback_url",
            "needs a webhook secret on the service",
            body.callback_url,
            "callback_url needs the service's MESHPLAN_WEBHOOK_SECRET to sign "
            "webhooks; it is not set",
        )
    if body.callback_url is not None:
        await _check_callback_url(body.callback_url, settings)
    body_hash = canonical_hash(body.model_dump(mode="json"))
    tenant = principal.tenant

    def resolve() -> tuple[str, str]:
        """(search id, how): created, replayed or deduplicated."""
        with Session(engine, expire_on_commit=False) as session:
            if key is not None:
                row = crud.get_idempotency_key(session=session, key=key, tenant=tenant)
                if row is not None:
                    return _replay(row, body_hash)
            prepared = planning.prepare_search(body, settings, session, tenant=tenant)
            duplicate = (
                crud.find_duplicate(
                    session=session, request_hash=prepared.request_hash, tenant=tenant
                )
                if dedupe
                else None
            )
            if duplicate is not None:
                if key is not None:
                    row = crud.claim_idempotency_key(
                        session=session,
                        key=key,
                        search_id=duplicate.id,
                        body_hash=body_hash,
                        tenant=tenant,
                    )
                    if row.search_id != duplicate.id or row.body_hash != body_hash:
                        return _replay(row, body_hash)  # a concurrent request won the key
                if body.callback_url is not None:
                    crud.add_delivery(
                        session=session, search_id=duplicate.id, url=body.callback_url
                    )
                return duplicate.id, "deduplicated"
            _check_capacity(session, settings, tenant)
            try:
                record = crud.create_search(
                    session=session,
                    request=prepared.request,
                    problem=prepared.problem,
                    request_hash=prepared.request_hash,
                    cost_model_name=prepared.cost_model_name,
                    cost_model_version=prepared.cost_model_version,
                    idempotency_key=key,
                    body_hash=body_hash,
                    callback_url=body.callback_url,
                    tenant=tenant,
                )
            except IntegrityError:
                row = (
                    crud.get_idempotency_key(session=session, key=key, tenant=tenant)
                    if key
                    else None
                )
                if row is None:
                    raise
                return _replay(row, body_hash)  # a concurrent request stored the key first
            return record.id, "created"

    search_id, how = await run_in_threadpool(resolve)
    if how == "created":
        runner.submit(search_id)
    elif body.callback_url is not None:
        _webhooks_notify(request)  # the search may have finished already
    final = await runner.wait(search_id, wait) if wait > 0 else None
    public = await _answer(engine, search_id, tenant, response)
    if how == "replayed":
        response.headers[REPLAYED_HEADER] = "true"
    elif how == "deduplicated":
        response.headers[DEDUPLICATED_HEADER] = search_id
    if final is not None and public["status"] in TERMINAL_STATUSES:
        response.status_code = status.HTTP_201_CREATED
    return public


@router.get("/v1/searches", response_model=SearchList)
def list_searches(
    session: SessionDep,
    principal: Reader,
    limit: Annotated[int, Query(ge=1, le=500, description=limit_description(50, 500))] = 50,
    offset: OffsetQuery = 0,
    cursor: CursorQuery = None,
    status_filter: Annotated[
        SearchStatus | None, Query(alias="status", description="Only this status.")
    ] = None,
) -> dict[str, Any]:
    """List searches, newest first."""
    _no_offset_with_cursor(cursor, offset)
    rows, total = crud.list_searches(
        session=session,
        limit=limit + 1,
        offset=offset,
        status=status_filter.value if status_filter else None,
        after=_search_after(cursor) if cursor is not None else None,
        tenant=principal.tenant,
    )
    more, rows = len(rows) > limit, rows[:limit]
    counted = [r.id for r in rows if r.status in PLANS_COUNTED]
    counts = crud.plan_counts(session=session, search_ids=counted)
    return {
        "items": [
            search_public(r, num_plans=counts.get(r.id, 0) if r.id in counted else None)
            for r in rows
        ],
        "total": total,
        "limit": limit,
        "offset": offset,
        "next_cursor": search_cursor(rows[-1]) if more else None,
    }


@router.get("/v1/searches/{search_id}", response_model=SearchPublic)
def read_search(search_id: SearchId, session: SessionDep, principal: Reader) -> dict[str, Any]:
    """Read a search: status, progress, stats, error and webhook deliveries."""
    record = _load(session, search_id, principal.tenant)
    return _public_with_count(session, record, deliveries=True)


@router.get("/v1/searches/{search_id}/deliveries", response_model=DeliveryList)
def list_search_deliveries(
    search_id: SearchId, session: SessionDep, principal: Reader
) -> dict[str, Any]:
    """List a search's webhook deliveries with every attempt."""
    _load(session, search_id, principal.tenant)
    items = [
        delivery_public(d, a) for d, a in crud.list_deliveries(session=session, search_id=search_id)
    ]
    return {"items": items, "total": len(items)}


@router.get("/v1/searches/{search_id}/plans", response_model=PlanList)
def list_search_plans(
    search_id: SearchId,
    session: SessionDep,
    principal: Reader,
    limit: Annotated[int, Query(ge=1, le=1000, description=limit_description(100, 1000))] = 100,
    offset: OffsetQuery = 0,
    cursor: CursorQuery = None,
    include_dominated: Annotated[
        bool,
        Query(
            description=(
                "Also list the plans folded under a better-ranked plan of the same layout "
                "(same degrees, schedule and framework; only recompute, micro-batch size, "
                "ZeRO stage, sequence parallelism, flash attention or the stage split "
                "differ) that is at least as good on every reported metric. Each has "
                "`dominated_by` (that plan's id) and `dominated_reason`. Ranks stay "
                "consecutive among the plans listed."
            )
        ),
    ] = False,
) -> dict[str, Any]:
    """List a search's plans, best first: by default the non-dominated ones (the diverse
    top-k); `?include_dominated=true` adds the plans folded under them."""
    _no_offset_with_cursor(cursor, offset)
    _load(session, search_id, principal.tenant)
    rows, total = crud.list_plans(
        session=session,
        search_id=search_id,
        limit=limit + 1,
        offset=offset,
        after_rank=_plan_after(cursor) if cursor is not None else None,
        include_dominated=include_dominated,
    )
    more, rows = len(rows) > limit, rows[:limit]
    next_cursor = _encode_cursor({"k": "p", "r": rows[-1].rank}) if more else None
    first = 1
    if rows:  # number the page's plans among the plans this list shows
        first += crud.count_plans_before(
            session=session,
            search_id=search_id,
            rank=rows[0].rank,
            include_dominated=include_dominated,
        )
    items = [plan_public(r, rank=first + i) for i, r in enumerate(rows)]
    return {"items": items, "total": total, "next_cursor": next_cursor}


# ---- Server-Sent Events ------------------------------------------------------------------
def _sse(event: str | None, data: str | None = None, event_id: str | None = None) -> str:
    """One SSE message (WHATWG HTML, "Server-sent events": `event:`, `id:`, `data:` lines
    and a blank line)."""
    lines = []
    if event_id is not None:
        lines.append(f"id: {event_id}")
    if event is not None:
        lines.append(f"event: {event}")
    if data is not None:
        lines.extend(f"data: {line}" for line in data.split("\n"))
    return "\n".join(lines) + "\n\n"


@router.post(
    "/v1/plans/{plan_id}/replan",
    response_model=SearchPublic,
    status_code=status.HTTP_202_ACCEPTED,
    responses={
        201: {"model": SearchPublic, "description": "finished within ?wait"},
        409: {"description": "the plan's search has not finished"},
        429: {"description": "rate limit or the tenant's active-search quota (Retry-After)"},
        503: {"description": "the search queue is full (Retry-After)"},
    },
)
async def replan_plan(
    plan_id: PlanId,
    body: ReplanRequest,
    principal: Writer,
    response: Response,
    settings: SettingsDep,
    engine: EngineDep,
    runner: RunnerDep,
    wait: Annotated[
        float, Query(description="Seconds to block for the result (0..max_wait_s).")
    ] = 0.0,
) -> dict[str, Any]:
    """Re-plan a stored plan after its cluster changed (lost nodes or GPUs, added node
    groups): a new search of the same model and workload on the cluster as it is now.

    Training: every plan it ranks carries its restart cost (`metrics.restart_peer_bytes`,
    `restart_reload_bytes`, `restart_s`: the state to reshard from surviving GPUs and to
    reload from the checkpoint, `solver/replan.py`) and `break_even_s` against the best plan
    keeping the old plan's degrees (`stats.replan.keep`).

    Serving: the plans are ranked with the plan keeping the old instance layouts, their
    counts re-fitted to the GPUs left (`metrics.replan_keep`, `stats.replan.keep`), and
    each carries which instances keep running and which restart (`restart_instances`,
    `restart_gpus`, `restart_kept_instances`, `restart_roles`: weight bytes per restarted
    instance and per GPU), the weights to load and the time it takes (`restart_reload_bytes`,
    `restart_s`), the goodput while it restarts and the requests lost (`restart_goodput_rps`,
    `restart_lost_requests`), the goodput before (`goodput_rps_before`) and `break_even_s`
    against keep (`solver/serving/replan.py`).

    The search links the plan it re-plans (`stats.replan.replan_of`) and its plans export
    like any other. A plan of a search that has not finished is a 409."""
    _check_wait(wait, settings)
    tenant = principal.tenant

    def resolve() -> str:
        with Session(engine, expire_on_commit=False) as session:
            plan = crud.get_plan(session=session, plan_id=plan_id, tenant=tenant)
            if plan is None:
                raise NotFound(f"no plan with id {plan_id!r}", id=plan_id)
            search = _load(session, plan.search_id, tenant)
            if search.status not in TERMINAL_STATUSES:
                raise Conflict(
                    f"plan {plan_id} belongs to search {search.id}, which is {search.status}: "
                    "re-plan a plan of a finished search",
                    id=plan_id,
                )
            prepared = prepare_replan(plan, search, body, settings, session, tenant=tenant)
            _check_capacity(session, settings, tenant)
            record = crud.create_search(
                session=session,
                request=prepared.request,
                problem=prepared.problem,
                request_hash=prepared.request_hash,
                cost_model_name=prepared.cost_model_name,
                cost_model_version=prepared.cost_model_version,
                tenant=tenant,
            )
            return record.id

    search_id = await run_in_threadpool(resolve)
    runner.submit(search_id)
    final = await runner.wait(search_id, wait) if wait > 0 else None
    public = await _answer(engine, search_id, tenant, response)
    if final is not None and public["status"] in TERMINAL_STATUSES:
        response.status_code = status.HTTP_201_CREATED
    return public


PARETO_TIMEOUT_SHARE = 0.75
"""Share of `request_timeout_s` the front search may take: the rest returns its answer."""


@router.get("/v1/searches/{search_id}/pareto", response_model=ParetoPublic)
async def read_search_pareto(
    search_id: SearchId,
    session: SessionDep,
    request: Request,
    settings: SettingsDep,
    principal: Reader,
) -> dict[str, Any]:
    """The Pareto front of a finished training search: its plans that no other plan of the
    space beats on throughput, GPUs used, cost per token, energy per token and peak memory.

    Exact over the search's space (every size its objective covers) when `complete`,
    computed from the stored problem in a request worker within the search's time limit
    (at most `max_search_time_limit_s` and three quarters of `request_timeout_s`; a front
    cut short answers with `complete` false and is computed again on the next request); a
    complete front is kept with the search and answered from there afterwards. Plans the
    search kept among its ranked plans carry their id. On a mixed cluster the front is exact over each pool alone (at every
    size the objective covers) and holds, of the plans across pools, those the search
    stored. A serving search, or one not finished, is a 409."""

    def load() -> tuple[SearchRecord, dict[str, str], list[dict[str, Any]]]:
        record = _load(session, search_id, principal.tenant)
        rows, _ = crud.list_plans(session=session, search_id=search_id, limit=MAX_OFFSET)
        ids = {canonical_hash(row.plan): row.id for row in rows}
        return record, ids, [dict(row.plan) for row in rows]

    record, ids, stored = await run_in_threadpool(load)
    if record.pareto is not None:  # computed completely before: the space has not changed
        return dict(record.pareto)
    # one computation per search at a time: concurrent first callers wait for it and answer
    # with the front it kept, instead of each queueing the whole front again
    lock = _PARETO_LOCKS.setdefault(search_id, asyncio.Lock())
    async with lock:
        await run_in_threadpool(session.expire_all)  # see what the computing request kept
        record, ids, stored = await run_in_threadpool(load)
        if record.pareto is not None:
            return dict(record.pareto)
        return await _compute_front(request, session, settings, search_id, record, ids, stored)


_PARETO_LOCKS: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()
"""The front being computed, per search (entries go with the last request holding one)."""


async def _compute_front(
    request: Request,
    session: Any,
    settings: Any,
    search_id: str,
    record: SearchRecord,
    ids: dict[str, str],
    stored: list[dict[str, Any]],
) -> dict[str, Any]:
    """The front of a finished training search, computed in a request worker and kept with
    the search when complete (`read_search_pareto`)."""
    problem = dict(record.problem)
    if (problem.get("workload") or {}).get("kind") == "serving":
        raise Conflict(
            f"search {search_id} plans serving; the front trades training figures",
            id=search_id,
        )
    if record.status != SearchStatus.SUCCEEDED.value:
        raise Conflict(
            f"search {search_id} is {record.status}: the front is for a finished search",
            id=search_id,
        )
    # within the worker's own timeout, so a front cut short still answers (complete false)
    budget = min(
        settings.max_search_time_limit_s, PARETO_TIMEOUT_SHARE * settings.request_timeout_s
    )
    answer: dict[str, Any] = await run_in_worker(request, "pareto", (problem, budget, stored))
    for item in answer["plans"]:
        item["id"] = ids.get(canonical_hash(item["plan"]))
    stats = answer.pop("stats")
    front = {
        "search_id": search_id,
        **answer,
        "complete": bool(stats.get("complete")),
        "stats": stats,
    }
    if front["complete"]:

        def keep() -> None:
            crud.store_pareto(session=session, search_id=search_id, front=front)

        await run_in_threadpool(keep)
    return front


@router.get(
    "/v1/searches/{search_id}/events",
    response_class=StreamingResponse,
    responses={
        200: {
            "content": {"text/event-stream": {}},
            "description": "progress events, then one done event",
        }
    },
)
async def search_events(
    search_id: SearchId,
    request: Request,
    settings: SettingsDep,
    engine: EngineDep,
    principal: Reader,
    last_event_id: Annotated[
        str | None,
        Header(
            alias="Last-Event-ID",
            description="The id of the last event received (EventSource sends it when it "
            "reconnects): the state it names is not sent again.",
        ),
    ] = None,
) -> StreamingResponse:
    """Stream a search's progress as Server-Sent Events until it finishes.

    `event: progress` with `{"status", "progress": {"evaluated", "total"}}` whenever either
    changes (the database is read every `sse_poll_interval_s`), then `event: done` with the
    search as `GET /v1/searches/{id}` shows it, and the stream ends; a finished search gets
    `done` at once. A comment line (`: keep-alive`) is sent after `sse_heartbeat_s` of
    silence. Event ids are `<status>.<evaluated>.<total>` (`done` for the last): a client
    reconnecting with `Last-Event-ID` is not sent the state it already has again. A stream
    still open after `sse_max_duration_s` ends without `done`: reconnect (EventSource does
    so by itself, after the `retry:` delay the stream announces)."""

    def snapshot() -> SearchRecord | None:
        with Session(engine, expire_on_commit=False) as session:
            return crud.get_search(session=session, search_id=search_id, tenant=principal.tenant)

    def final_json() -> str:
        with Session(engine, expire_on_commit=False) as session:
            record = _load(session, search_id, principal.tenant)
            public = _public_with_count(session, record, deliveries=True)
        return SearchPublic.model_validate(public).model_dump_json()

    if await run_in_threadpool(snapshot) is None:
        raise NotFound(f"no search with id {search_id!r}", id=search_id)

    async def stream() -> AsyncIterator[str]:
        sent_id = last_event_id
        last_write = time.monotonic()
        ends_at = last_write + settings.sse_max_duration_s
        terminal_since: float | None = None
        yield f"retry: {max(100, int(settings.sse_poll_interval_s * 4000))}\n\n"
        while True:
            record = await run_in_threadpool(snapshot)
            if record is None:  # deleted meanwhile
                return
            now = time.monotonic()
            if record.status in TERMINAL_STATUSES and terminal_since is None:
                terminal_since = now
            if is_complete(record) or (
                terminal_since is not None and now - terminal_since > _CANCELLED_GRACE_S
            ):
                yield _sse("done", await run_in_threadpool(final_json), "done")
                return
            event_id = f"{record.status}.{record.progress_evaluated}.{record.progress_total}"
            if event_id != sent_id:
                data = {
                    "status": record.status,
                    "progress": {
                        "evaluated": record.progress_evaluated,
                        "total": record.progress_total,
                    },
                }
                yield _sse("progress", json.dumps(data, separators=(",", ":")), event_id)
                sent_id, last_write = event_id, now
            elif now - last_write >= settings.sse_heartbeat_s:
                yield ": keep-alive\n\n"
                last_write = now
            if now >= ends_at or await request.is_disconnected():
                return
            await asyncio.sleep(settings.sse_poll_interval_s)

    return StreamingResponse(
        stream(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


@router.post(
    "/v1/searches/{search_id}/cancel",
    response_model=SearchPublic,
    responses={409: {"description": "the search has already finished"}},
)
def cancel_search(
    search_id: SearchId, session: SessionDep, runner: RunnerDep, principal: Writer
) -> dict[str, Any]:
    """Cancel a queued or running search (409 once it has finished).

    An action on the search: the search stays, readable with its status `cancelled`, its
    progress and the plans found so far."""
    return _cancel(session, runner, principal, search_id)


@router.delete(
    "/v1/searches/{search_id}",
    response_model=SearchPublic,
    responses={409: {"description": "the search has already finished"}},
)
def cancel_search_by_delete(
    search_id: SearchId, session: SessionDep, runner: RunnerDep, principal: Writer
) -> dict[str, Any]:
    """Cancel a queued or running search, as `POST …/cancel` (409 once it has finished).

    The HTTP contract's cancel (API.md: `DELETE /v1/searches/{id}` cancels a queued or
    running search), kept for the clients and schedulers written against it. Unlike most
    DELETEs the search is not removed (RFC 9110 §9.3.5 lets a DELETE's effect be the
    server's to define): it stays readable with status `cancelled` and its plans. New
    clients use `POST /v1/searches/{id}/cancel`, which says what it does."""
    return _cancel(session, runner, principal, search_id)


def _cancel(
    session: Session, runner: SearchRunner, principal: Principal, search_id: str
) -> dict[str, Any]:
    record = _load(session, search_id, principal.tenant)
    if not runner.cancel(search_id):
        session.refresh(record)
        raise Conflict(
            f"search {search_id} has already finished ({record.status}); only queued or "
            "running searches can be cancelled",
            status_value=record.status,
        )
    session.refresh(record)
    return _public_with_count(session, record)
