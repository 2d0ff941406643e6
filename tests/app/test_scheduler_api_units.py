"""Pieces of the scheduler-facing API checked on their own: the webhook signature against a
published HMAC-SHA256 vector, the backoff schedule, If-None-Match matching and the ETag
middleware's limits, and the database operations that make idempotency keys, keyset pages
and delivery claims race-safe (on SQLite and on PostgreSQL), plus the whole keyed/webhook
flow over a real server on PostgreSQL."""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.responses import StreamingResponse
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, func, select
from test_database import pg_url  # noqa: F401  (the fixture)
from test_scheduler_api import SECRET, LiveServer, Receiver, server_settings, small

from app.api.etag import ETagMiddleware, if_none_match_matches, strong_etag
from app.db import crud, migrate
from app.db.models import IdempotencyKeyRecord, SearchRecord, WebhookDeliveryRecord
from app.db.session import make_engine
from app.services.webhooks import backoff_delay_s, sign, verify_signature
from tests.support import TestClient


# ---- signatures, backoff, If-None-Match ----------------------------------------------------
def test_signature_matches_the_rfc_4231_vector() -> None:
    # RFC 4231 §4.3, test case 2: key "Jefe", data "what do ya want for nothing?"
    expected = "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
    assert sign("Jefe", b"what do ya want for nothing?") == "sha256=" + expected
    assert verify_signature("Jefe", b"what do ya want for nothing?", "sha256=" + expected)
    assert not verify_signature("Jefe", b"what do ya want for nothing!", "sha256=" + expected)
    assert not verify_signature("jefe", b"what do ya want for nothing?", "sha256=" + expected)
    assert not verify_signature("Jefe", b"x", None)


def test_backoff_doubles_from_the_base_up_to_the_cap() -> None:
    assert [backoff_delay_s(n, 2.0, 600.0) for n in range(0, 11)] == [
        0.0,
        2.0,
        4.0,
        8.0,
        16.0,
        32.0,
        64.0,
        128.0,
        256.0,
        512.0,
        600.0,
    ]
    assert backoff_delay_s(10_000, 1.0, 30.0) == 30.0  # no overflow


@pytest.mark.parametrize(
    ("header", "matches"),
    [
        (None, False),
        ('"abc"', True),
        ('W/"abc"', True),
        ('"x", "abc"', True),
        ('"x",W/"abc" ', True),
        ("*", True),
        ('"abcd"', False),
        ('"ab"', False),
        ("abc", False),
        ("", False),
    ],
)
def test_if_none_match(header: str | None, matches: bool) -> None:
    assert if_none_match_matches(header, '"abc"') is matches


def _etag_app(max_bytes: int) -> FastAPI:
    app = FastAPI()
    app.add_middleware(ETagMiddleware, max_bytes=max_bytes)

    @app.get("/chunks")
    def chunks() -> StreamingResponse:
        async def body() -> AsyncIterator[bytes]:
            for part in (b'{"a": [', b"1, 2", b"]}"):
                yield part

        return StreamingResponse(body(), media_type="application/json")

    @app.get("/big")
    def big() -> dict[str, Any]:
        return {"items": list(range(2000))}

    @app.get("/text")
    def text() -> StreamingResponse:
        return StreamingResponse(iter([b"plain"]), media_type="text/plain")

    return app


def test_etag_middleware_tags_whole_bodies_and_passes_big_ones_through() -> None:
    with TestClient(_etag_app(max_bytes=1000)) as client:
        chunked = client.get("/chunks")
        assert chunked.content == b'{"a": [1, 2]}'
        assert chunked.headers["etag"] == '"' + hashlib.sha256(b'{"a": [1, 2]}').hexdigest() + '"'
        assert (
            client.get("/chunks", headers={"If-None-Match": chunked.headers["etag"]}).status_code
            == 304
        )
        big = client.get("/big")  # 8.9 kB > 1000 bytes: streamed untagged, intact
        assert "etag" not in big.headers and big.json() == {"items": list(range(2000))}
        assert "etag" not in client.get("/text").headers
    assert strong_etag(b"") == '"' + hashlib.sha256(b"").hexdigest() + '"'


# ---- database operations ---------------------------------------------------------------------
@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'units.db'}"


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def engine(request: pytest.FixtureRequest) -> Iterator[Engine]:
    url = request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url")
    db = make_engine(url)
    migrate.upgrade(db)
    yield db
    db.dispose()


def _new_search(session: Session, **kwargs: Any) -> SearchRecord:
    return crud.create_search(
        session=session,
        request={},
        problem={},
        request_hash="h" * 64,
        cost_model_name="analytical",
        cost_model_version="1",
        **kwargs,
    )


def test_keyset_pages_break_ties_by_id(engine: Engine) -> None:
    same = datetime(2025, 5, 1, 12, 0, 0, 123456, tzinfo=UTC)
    with Session(engine, expire_on_commit=False) as session:
        for _ in range(7):
            session.add(
                SearchRecord(
                    request={},
                    problem={},
                    request_hash="h",
                    cost_model_name="a",
                    cost_model_version="1",
                    created_at=same,
                )
            )
        session.commit()
        everything, total = crud.list_searches(session=session, limit=100, offset=0)
        assert total == 7
        assert [r.id for r in everything] == sorted((r.id for r in everything), reverse=True)
        walked: list[str] = []
        after = None
        while True:
            page, _ = crud.list_searches(session=session, limit=3, offset=0, after=after)
            if not page:
                break
            walked += [r.id for r in page]
            after = (same, page[-1].id)
        assert walked == [r.id for r in everything]


def test_a_key_stores_one_search(engine: Engine) -> None:
    with Session(engine, expire_on_commit=False) as session:
        first = _new_search(session, idempotency_key="k1", body_hash="a" * 64)
        with pytest.raises(IntegrityError):
            _new_search(session, idempotency_key="k1", body_hash="b" * 64)
        # the loser's search was rolled back with its key
        assert session.exec(select(func.count()).select_from(SearchRecord)).one() == 1
        row = crud.get_idempotency_key(session=session, key="k1")
        assert row is not None and (row.search_id, row.body_hash) == (first.id, "a" * 64)
        # claiming a taken key answers the stored row
        other = _new_search(session)
        claimed = crud.claim_idempotency_key(
            session=session, key="k1", search_id=other.id, body_hash="c" * 64
        )
        assert (claimed.search_id, claimed.body_hash) == (first.id, "a" * 64)
        fresh = crud.claim_idempotency_key(
            session=session, key="k2", search_id=other.id, body_hash="c" * 64
        )
        assert fresh.search_id == other.id
        assert session.exec(select(func.count()).select_from(IdempotencyKeyRecord)).one() == 2


def test_concurrent_stores_of_one_key_have_one_winner(engine: Engine) -> None:
    barrier = threading.Barrier(6)
    outcomes: list[str] = []
    lock = threading.Lock()

    def store(n: int) -> None:
        with Session(engine, expire_on_commit=False) as session:
            barrier.wait()
            try:
                _new_search(session, idempotency_key="race", body_hash=str(n))
                outcome = "stored"
            except IntegrityError:
                outcome = "lost"
        with lock:
            outcomes.append(outcome)

    threads = [threading.Thread(target=store, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(outcomes) == ["lost"] * 5 + ["stored"]
    with Session(engine) as session:
        assert session.exec(select(func.count()).select_from(SearchRecord)).one() == 1


def test_a_due_delivery_is_claimed_once(engine: Engine) -> None:
    now = datetime.now(UTC)
    with Session(engine, expire_on_commit=False) as session:
        search = _new_search(session, callback_url="http://127.0.0.1:9/x")
        [(waiting, _)] = crud.list_deliveries(session=session, search_id=search.id)
        assert waiting.status == "waiting"
        assert crud.deliveries_to_activate(session=session) == []  # the search is queued
        crud.fail_search(session=session, search_id=search.id, error={"status": 500})
        [(delivery, finished)] = crud.deliveries_to_activate(session=session)
        assert finished.id == search.id
        assert crud.activate_delivery(
            session=session,
            delivery_id=delivery.id,
            event="search.failed",
            payload={"x": 1},
            now=now,
        )
        assert not crud.activate_delivery(
            session=session,
            delivery_id=delivery.id,
            event="search.failed",
            payload={"x": 2},
            now=now,
        )
    # two senders read the same due row; only one may send
    reads = []
    for _ in range(2):
        with Session(engine, expire_on_commit=False) as session:
            reads.append(crud.due_deliveries(session=session, now=now + timedelta(seconds=1)))
    assert [len(r) for r in reads] == [1, 1]
    claims = []
    for [due] in reads:
        with Session(engine) as session:
            claims.append(
                crud.claim_delivery(
                    session=session,
                    delivery=due,
                    now=now + timedelta(seconds=1),
                    lease_until=now + timedelta(seconds=60),
                )
            )
    assert claims == [True, False]
    with Session(engine) as session:
        assert crud.due_deliveries(session=session, now=now + timedelta(seconds=2)) == []
        status = crud.record_attempt(
            session=session,
            delivery_id=reads[0][0].id,
            number=1,
            attempted_at=now,
            duration_s=0.01,
            status_code=500,
            error="HTTP 500",
            next_attempt_at=now + timedelta(seconds=5),
        )
        assert status == "pending"
        row = session.get(WebhookDeliveryRecord, reads[0][0].id)
        assert row is not None and row.attempt_count == 1 and row.payload == {"x": 1}


# ---- the whole flow on PostgreSQL -----------------------------------------------------------
@pytest.mark.postgres
def test_keys_webhooks_and_cursors_over_a_real_server_on_postgresql(
    pg_url: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    hooks = Receiver()
    settings = server_settings(tmp_path / "unused.db").model_copy(update={"database_url": pg_url})
    try:
        with LiveServer(settings) as server:
            body = small(constraints={"time_limit_s": 9}, callback_url=hooks.url("pg", fail=1))
            answers: list[httpx.Response] = []
            barrier = threading.Barrier(6)

            def post() -> None:
                with httpx.Client(base_url=server.base_url, timeout=30) as client:
                    barrier.wait()
                    answers.append(
                        client.post(
                            "/v1/searches?dedupe=false&wait=20",
                            json=body,
                            headers={"Idempotency-Key": "pg-race"},
                        )
                    )

            threads = [threading.Thread(target=post) for _ in range(6)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(30)
            assert len({r.json()["id"] for r in answers}) == 1
            assert server.client.get("/v1/searches").json()["total"] == 1
            search_id = answers[0].json()["id"]
            conflict = server.client.post(
                "/v1/searches", json={**body, "top_k": 2}, headers={"Idempotency-Key": "pg-race"}
            )
            assert conflict.status_code == 409
            for _ in range(300):
                deliveries = server.client.get(f"/v1/searches/{search_id}/deliveries").json()
                if deliveries["items"][0]["status"] == "delivered":
                    break
                time.sleep(0.05)
            [delivery] = deliveries["items"]
            assert [a["status_code"] for a in delivery["attempts"]] == [500, 204]
            got = hooks.received("pg")
            assert verify_signature(
                SECRET,
                got[-1]["body"],
                {k.lower(): v for k, v in got[-1]["headers"].items()}["x-meshplan-signature"],
            )
            assert json.loads(got[-1]["body"])["search"]["id"] == search_id
            for n in range(4):
                server.client.post("/v1/searches", json=small(constraints={"time_limit_s": 3 + n}))
            ids = [s["id"] for s in server.client.get("/v1/searches").json()["items"]]
            walked, cursor = [], None
            while True:
                page = server.client.get(
                    "/v1/searches?limit=2" + (f"&cursor={cursor}" if cursor else "")
                ).json()
                walked += [s["id"] for s in page["items"]]
                cursor = page["next_cursor"]
                if cursor is None:
                    break
            assert walked == ids and len(ids) == 5
    finally:
        hooks.close()
