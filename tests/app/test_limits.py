"""Limits: the per-client token bucket (429 + Retry-After), a tenant's cap on queued and
running searches (429 + Retry-After) and the bounded global queue (503 + Retry-After), with
auth on (per key, per tenant) and off (per client address, tenant `default`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from app_support import assert_problem
from sqlmodel import Session

from tests.support import TestClient

ADMIN_SECRET = "limits-admin-secret"
ADMIN = {"Authorization": f"Bearer {ADMIN_SECRET}"}


def _key(client: Any, tenant: str) -> dict[str, str]:
    made = client.post(
        "/v1/admin/api-keys", json={"tenant": tenant, "scopes": ["write"]}, headers=ADMIN
    )
    assert made.status_code == 201, made.text
    return {"Authorization": f"Bearer {made.json()['secret']}"}


def _queue_searches(client: Any, tenant: str, count: int) -> None:
    """Store `count` queued searches of `tenant` that the runner is never told about (they
    stay queued: a deterministic full queue)."""
    from app.db import crud

    with Session(client.app.state.engine) as session:
        for i in range(count):
            crud.create_search(
                session=session,
                request={},
                problem={},
                request_hash=f"{tenant}-{i}",
                cost_model_name="analytical",
                cost_model_version="1",
                tenant=tenant,
            )


def test_token_bucket_arithmetic() -> None:
    from app.api.limits import TokenBuckets

    buckets = TokenBuckets(rate_per_s=2.0, burst=2)
    assert buckets.take("k", now=0.0) == 0.0
    assert buckets.take("k", now=0.0) == 0.0
    assert buckets.take("k", now=0.0) == pytest.approx(0.5)  # one token at 2/s: 0.5 s away
    assert buckets.take("k", now=0.25) == pytest.approx(0.25)  # half a token back
    assert buckets.take("k", now=0.5) == 0.0
    assert buckets.take("other", now=0.5) == 0.0  # buckets are per client
    assert buckets.take("k", now=10.0) == 0.0  # refilled, capped at the burst
    assert buckets.take("k", now=10.0) == 0.0
    assert buckets.take("k", now=10.0) > 0


def test_rate_limit_per_key_answers_429_with_retry_after(
    settings_factory: Callable[..., Any],
) -> None:
    from app.main import create_app

    settings = settings_factory(
        auth="on", admin_key=ADMIN_SECRET, rate_limit_per_s=0.2, rate_limit_burst=3
    )
    with TestClient(create_app(settings)) as client:
        a, b = _key(client, "team-a"), _key(client, "team-b")
        for _ in range(3):
            assert client.get("/v1/searches", headers=a).status_code == 200
        limited = client.get("/v1/searches", headers=a)
        problem = assert_problem(limited, 429)
        assert problem["type"].endswith("/rate-limited")
        # one token at 0.2/s is 5 s away (less the few ms since the burst began): ceil → 5
        assert limited.headers["retry-after"] == "5" and problem["retry_after_s"] == 5
        assert client.get("/v1/searches", headers=b).status_code == 200  # others unaffected
        assert client.get("/v1/health").status_code == 200  # open endpoints are not limited


def test_rate_limit_with_auth_off_is_per_client_address(
    settings_factory: Callable[..., Any],
) -> None:
    from app.main import create_app

    settings = settings_factory(rate_limit_per_s=0.5, rate_limit_burst=2)
    with TestClient(create_app(settings)) as client:
        assert client.get("/v1/searches").status_code == 200
        assert client.get("/v1/searches").status_code == 200
        limited = client.get("/v1/searches")
        assert_problem(limited, 429)
        assert limited.headers["retry-after"] == "2"


def test_tenant_cap_on_active_searches_is_429_and_spares_other_tenants(
    settings_factory: Callable[..., Any], tiny: dict[str, Any]
) -> None:
    from app.main import create_app

    settings = settings_factory(auth="on", admin_key=ADMIN_SECRET, tenant_max_active_searches=2)
    with TestClient(create_app(settings)) as client:
        a, b = _key(client, "team-a"), _key(client, "team-b")
        _queue_searches(client, "team-a", 2)
        refused = client.post("/v1/searches?dedupe=false", json=tiny, headers=a)
        problem = assert_problem(refused, 429)
        assert problem["type"].endswith("/tenant-search-quota") and problem["limit"] == 2
        assert int(refused.headers["retry-after"]) >= 1
        assert client.get("/v1/searches?status=queued", headers=a).json()["total"] == 2
        assert client.post("/v1/searches", json=tiny, headers=b).status_code == 202


def test_a_full_queue_is_503_for_everyone(
    settings_factory: Callable[..., Any], tiny: dict[str, Any]
) -> None:
    from app.main import create_app

    settings = settings_factory(max_queued_searches=3, tenant_max_active_searches=100)
    with TestClient(create_app(settings)) as client:
        _queue_searches(client, "someone-else", 3)
        refused = client.post("/v1/searches", json=tiny)
        problem = assert_problem(refused, 503)
        assert problem["type"].endswith("/queue-full") and problem["limit"] == 3
        assert int(refused.headers["retry-after"]) >= 1
        assert client.get("/v1/searches").json()["total"] == 0  # nothing was stored


def test_one_client_cannot_queue_without_bound(
    settings_factory: Callable[..., Any], tiny: dict[str, Any], slow_solver: None
) -> None:
    """The issue's flood (938 searches in 15 s) with the defaults scaled down: a client
    sending 30 distinct searches gets at most its cap stored; the rest are 429s."""
    from app.main import create_app

    settings = settings_factory(tenant_max_active_searches=4, rate_limit_burst=1000)
    with TestClient(create_app(settings)) as client:
        codes = [
            client.post("/v1/searches?dedupe=false", json={**tiny, "top_k": 1 + i % 5}).status_code
            for i in range(30)
        ]
        assert codes.count(202) == 4 and codes.count(429) == 26
        assert client.get("/v1/searches").json()["total"] == 4
        for item in client.get("/v1/searches").json()["items"]:
            client.post(f"/v1/searches/{item['id']}/cancel")


def _redis_url() -> str:
    """The machine's Redis (skip, saying why, when there is none)."""
    import redis

    url = "redis://127.0.0.1:6379/0"
    try:
        redis.Redis.from_url(url, socket_connect_timeout=0.5).ping()
    except redis.RedisError as exc:
        pytest.skip(f"no Redis at {url} ({type(exc).__name__}): shared rate buckets untested")
    return url


def test_redis_buckets_are_one_bucket_for_every_replica(
    settings_factory: Callable[..., Any],
) -> None:
    """Two apps (replicas) on one Redis share a key's bucket: of 2 x 4 requests with a burst
    of 4 and almost no refill, exactly 4 pass and the others answer 429 with Retry-After.
    Per-process buckets (no Redis) would let 4 pass on each replica."""
    from app.main import create_app

    url = _redis_url()
    limits = {"rate_limit_per_s": 0.01, "rate_limit_burst": 4}
    common = {"auth": "on", "admin_key": ADMIN_SECRET, **limits}
    one = create_app(settings_factory(rate_limit_redis_url=url, **common))
    two = create_app(settings_factory(rate_limit_redis_url=url, **common))
    alone = create_app(settings_factory(**common))
    with TestClient(one) as a, TestClient(two) as b, TestClient(alone) as c:
        headers = _key(a, "team-shared")  # same database: a key of both replicas
        statuses = [
            replica.get("/v1/searches", headers=headers).status_code
            for _ in range(4)
            for replica in (a, b)
        ]
        assert statuses.count(200) == 4 and statuses.count(429) == 4, statuses
        refused = b.get("/v1/searches", headers=headers)
        body = assert_problem(refused, 429)
        assert body["type"].endswith("/rate-limited")
        assert 90 <= int(refused.headers["retry-after"]) <= 100  # (1 - tokens) / 0.01 s
        # the third app keeps its own bucket: its 4 pass although the shared one is empty
        assert [c.get("/v1/searches", headers=headers).status_code for _ in range(5)] == [
            200,
            200,
            200,
            200,
            429,
        ]


def test_redis_down_falls_back_to_per_process_buckets(
    settings_factory: Callable[..., Any],
) -> None:
    """Nothing listens at the Redis address: requests still pass (limited per process) and
    the failures are counted, never a 500."""
    import socket

    from app.main import create_app

    with socket.socket() as s:  # a free port: nothing answers there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    settings = settings_factory(
        rate_limit_redis_url=f"redis://127.0.0.1:{port}/0",
        rate_limit_per_s=0.01,
        rate_limit_burst=2,
    )
    with TestClient(create_app(settings)) as client:
        statuses = [client.get("/v1/searches").status_code for _ in range(3)]
        assert statuses == [200, 200, 429]
        assert client.app.state.rate_buckets.failures == 3
