"""The scheduler-facing API over a real server on loopback: uvicorn serves the app from a
background thread (temporary SQLite file, thread-pool runner); webhooks go to a small
`http.server` receiver on loopback that records what it gets, checks nothing itself and
fails the first N requests of a path on demand.

Covered: Idempotency-Key replay, 409 and bounds, one search for concurrent requests with one
key; deduplication of identical requests (and `?dedupe=false`); signed webhooks with retries
and backoff, give-up after the last attempt, failed/cancelled events, deliveries listed on
the search and resumed after a restart; Server-Sent Events (progress, heartbeats,
Last-Event-ID, immediate done, 404); ETags with If-None-Match → 304; cursor pagination."""

from __future__ import annotations

import hashlib
import hmac
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from app_support import assert_problem, error_fields
from sqlalchemy import update
from sqlmodel import Session

from app.core.config import Settings
from app.db.models import WebhookDeliveryRecord
from app.db.session import make_engine
from app.main import create_app
from app.services import planning

SECRET = "test-secret-\u00e9"  # non-ASCII on purpose: the key is the UTF-8 bytes
BASE_DELAY_S = 0.05
MAX_ATTEMPTS = 4
SLOW_TOP_K = 9
"""Searches asking for this many plans run slowly (see `slow_marked_searches`)."""
SLOW_START_S = 0.8
FAILURE_BODY = b"internal admin token: s3cr3t-RECEIVER-BODY"
"""What the receiver answers with its failures: it must never show in the API."""


def small(**extra: Any) -> dict[str, Any]:
    """Llama-3-8B on one node of 8 H100s: searched in about 0.1 s."""
    body: dict[str, Any] = {
        "model": {"preset": "llama3-8b"},
        "cluster": {
            "node_groups": [{"accelerator": "h100-sxm", "num_nodes": 1, "gpus_per_node": 8}]
        },
        "workload": {"kind": "training", "global_batch_size": 64, "sequence_length": 4096},
        "constraints": {"time_limit_s": 10},
        "top_k": 7,
    }
    body.update(extra)
    return body


def infeasible(**extra: Any) -> dict[str, Any]:
    """Llama-3-70B needs ~1.1 TB of training state; 4 H100s hold 0.34 TB: the search fails."""
    body = small(model={"preset": "llama3-70b"}, **extra)
    body["cluster"] = {
        "node_groups": [{"accelerator": "h100-sxm", "num_nodes": 1, "gpus_per_node": 4}]
    }
    return body


# ---- a real server and a webhook receiver on loopback ---------------------------------------
class LiveServer:
    """uvicorn serving `create_app(settings)` on 127.0.0.1, a free port, in a thread."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.base_url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(
            create_app(settings),
            log_config=None,
            log_level="warning",
            lifespan="on",
            timeout_graceful_shutdown=5,
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True
        )
        self.client = httpx.Client(base_url=self.base_url, timeout=30)

    def __enter__(self) -> LiveServer:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            assert self.thread.is_alive() and time.monotonic() < deadline, "server did not start"
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.client.close()
        self.server.should_exit = True
        self.thread.join(20)
        self.sock.close()
        assert not self.thread.is_alive(), "server did not stop"


class Receiver:
    """Records every POST: arrival time, headers, raw body. `url(name, fail=N)`: the first
    N requests to that path get a 500 whose body is `FAILURE_BODY`."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.requests: dict[str, list[dict[str, Any]]] = {}
        self.failures: dict[str, int] = {}
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                name = self.path.rsplit("/", 1)[-1]
                with receiver.lock:
                    seen = receiver.requests.setdefault(name, [])
                    seen.append(
                        {
                            "at": time.monotonic(),
                            "headers": dict(self.headers.items()),
                            "body": body,
                        }
                    )
                    fail = len(seen) <= receiver.failures.get(name, 0)
                self.send_response(500 if fail else 204)
                if fail:
                    self.send_header("Content-Length", str(len(FAILURE_BODY)))
                    self.end_headers()
                    self.wfile.write(FAILURE_BODY)
                else:
                    self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def url(self, name: str, fail: int = 0) -> str:
        with self.lock:
            self.failures[name] = fail
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/hooks/{name}"

    def received(self, name: str) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.requests.get(name, []))

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)


def server_settings(db: Path, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "database_url": f"sqlite:///{db}",
        "search_executor": "thread",
        "search_workers": 3,
        "progress_interval_s": 0.05,
        "webhook_secret": SECRET,
        "webhook_base_delay_s": BASE_DELAY_S,
        "webhook_max_delay_s": 1.0,
        "webhook_max_attempts": MAX_ATTEMPTS,
        "webhook_timeout_s": 2.0,
        "webhook_poll_interval_s": 0.2,
        "sse_poll_interval_s": 0.05,
        "sse_heartbeat_s": 0.2,
        # the receiver is on loopback: allow-listed (the public-address rule is tested in
        # test_webhook_targets.py)
        "webhook_allow_http": True,
        "webhook_allow_hosts": ["127.0.0.1"],
    }
    values.update(overrides)
    return Settings(**values)


@pytest.fixture(scope="module")
def slow_marked_searches() -> Iterator[None]:
    """Searches with top_k = SLOW_TOP_K first sleep SLOW_START_S (or until stopped), then
    report progress slowly (5 ms per progress call), so that they can be watched running."""
    real = planning.run_problem

    def run(problem: dict[str, Any], *, progress: Any, should_stop: Any) -> Any:
        if problem.get("top_k") != SLOW_TOP_K:
            return real(problem, progress=progress, should_stop=should_stop)
        deadline = time.monotonic() + SLOW_START_S
        while time.monotonic() < deadline and not should_stop():
            time.sleep(0.01)

        def slow_progress(evaluated: int, total: int | None) -> None:
            time.sleep(0.005)
            progress(evaluated, total)

        return real(problem, progress=slow_progress, should_stop=should_stop)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(planning, "run_problem", run)
        yield


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    hooks = Receiver()
    yield hooks
    hooks.close()


@pytest.fixture(scope="module")
def live(
    tmp_path_factory: pytest.TempPathFactory, slow_marked_searches: None
) -> Iterator[LiveServer]:
    db = tmp_path_factory.mktemp("live") / "meshplan.db"
    with LiveServer(server_settings(db)) as server:
        yield server


@pytest.fixture
def api(live: LiveServer) -> httpx.Client:
    return live.client


def poll(fetch: Callable[[], Any], done: Callable[[Any], bool], timeout_s: float = 15) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = fetch()
        if done(value):
            return value
        assert time.monotonic() < deadline, f"timed out; last value: {value}"
        time.sleep(0.03)


def finished(api: httpx.Client, search_id: str) -> dict[str, Any]:
    body: dict[str, Any] = poll(
        lambda: api.get(f"/v1/searches/{search_id}").json(), lambda s: s["finished_at"] is not None
    )
    return body


def deliveries_settled(api: httpx.Client, search_id: str) -> list[dict[str, Any]]:
    search = poll(
        lambda: api.get(f"/v1/searches/{search_id}").json(),
        lambda s: (
            s["deliveries"] and all(d["status"] in ("delivered", "failed") for d in s["deliveries"])
        ),
    )
    deliveries: list[dict[str, Any]] = search["deliveries"]
    return deliveries


def expected_signature(body: bytes) -> str:
    return "sha256=" + hmac.new(SECRET.encode("utf-8"), body, hashlib.sha256).hexdigest()


# ---- idempotency ---------------------------------------------------------------------------
def test_same_key_and_body_replays_the_search(api: httpx.Client) -> None:
    body = small(constraints={"time_limit_s": 11})
    first = api.post("/v1/searches?wait=20", json=body, headers={"Idempotency-Key": "job-1"})
    assert first.status_code == 201, first.text
    assert "idempotent-replayed" not in first.headers
    search = first.json()
    again = api.post("/v1/searches?wait=20", json=body, headers={"Idempotency-Key": "job-1"})
    assert again.status_code == 201  # as the creation answered: finished within ?wait
    assert again.headers["idempotent-replayed"] == "true"
    assert again.headers["location"] == first.headers["location"] == f"/v1/searches/{search['id']}"
    assert again.json()["id"] == search["id"]
    # the same body with its keys in another order and defaults spelled out is the same body
    reordered = {"top_k": 7, "objective": "max_throughput", **{k: body[k] for k in reversed(body)}}
    third = api.post("/v1/searches", json=reordered, headers={"Idempotency-Key": "job-1"})
    assert third.status_code == 202 and third.json()["id"] == search["id"]
    assert third.headers["idempotent-replayed"] == "true"
    # a replay does not run anything again
    assert api.get(f"/v1/searches/{search['id']}").json()["attempts"] == 1


def test_same_key_with_another_body_is_a_409(api: httpx.Client) -> None:
    body = small(constraints={"time_limit_s": 12})
    created = api.post("/v1/searches", json=body, headers={"Idempotency-Key": "job-2"}).json()
    other = api.post(
        "/v1/searches", json={**body, "top_k": 3}, headers={"Idempotency-Key": "job-2"}
    )
    problem = assert_problem(other, 409, path="/v1/searches")
    assert problem["type"].endswith("/idempotency-key-reused")
    assert problem["header"] == "Idempotency-Key" and problem["key"] == "job-2"
    assert "Idempotency-Key" in problem["detail"] and "'job-2'" in problem["detail"]
    assert problem["search_id"] == created["id"]


@pytest.mark.parametrize(
    ("key", "ok"),
    [
        ("k" * 255, True),
        ("k" * 256, False),
        ("has space", False),
        ("", False),
        ("tab\tkey", False),
        ("caf\u00e9", False),
        ("a-b_c.d:e/f~!", True),
    ],
)
def test_idempotency_key_bounds(api: httpx.Client, key: str, ok: bool) -> None:
    # a distinct body per key: an accepted key must not replay another case's search
    body = small(constraints={"time_limit_s": 13 + len(key) % 50 / 100})
    headers = {b"Idempotency-Key": key.encode("utf-8")}  # raw UTF-8 bytes on the wire
    response = api.post("/v1/searches?dedupe=false", json=body, headers=headers)
    if ok:
        assert response.status_code in (201, 202), response.text
    else:
        problem = assert_problem(response, 422)
        assert error_fields(problem) == ["Idempotency-Key"]


def test_concurrent_requests_with_one_key_create_one_search(
    api: httpx.Client, live: LiveServer
) -> None:
    body = small(constraints={"time_limit_s": 14})
    before = api.get("/v1/searches?limit=1").json()["total"]
    barrier = threading.Barrier(8)
    answers: list[httpx.Response] = []
    lock = threading.Lock()

    def post() -> None:
        with httpx.Client(base_url=live.base_url, timeout=30) as client:
            barrier.wait()
            # dedupe off: only the key can keep the requests from creating 8 searches
            response = client.post(
                "/v1/searches?dedupe=false", json=body, headers={"Idempotency-Key": "race-1"}
            )
        with lock:
            answers.append(response)

    threads = [threading.Thread(target=post) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(answers) == 8 and all(r.status_code == 202 for r in answers), answers
    assert len({r.json()["id"] for r in answers}) == 1
    assert sum("idempotent-replayed" not in r.headers for r in answers) == 1
    assert api.get("/v1/searches?limit=1").json()["total"] == before + 1


# ---- deduplication -----------------------------------------------------------------------------
def test_identical_requests_get_the_stored_search(api: httpx.Client) -> None:
    body = small(constraints={"time_limit_s": 15})
    first = api.post("/v1/searches?wait=20", json=body)
    assert first.status_code == 201 and "x-meshplan-deduplicated" not in first.headers
    search_id = first.json()["id"]
    again = api.post("/v1/searches", json=body)
    assert again.status_code == 202
    assert again.headers["x-meshplan-deduplicated"] == search_id == again.json()["id"]
    assert again.json()["status"] == "succeeded"
    assert api.post("/v1/searches?wait=5", json=body).status_code == 201
    fresh = api.post("/v1/searches?dedupe=false", json=body)
    assert "x-meshplan-deduplicated" not in fresh.headers
    assert fresh.json()["id"] != search_id
    # a different time limit is a different problem
    other = api.post("/v1/searches", json=small(constraints={"time_limit_s": 15.5}))
    assert other.json()["id"] not in (search_id, fresh.json()["id"])


def test_failed_and_cancelled_searches_are_not_reused(api: httpx.Client) -> None:
    failed = api.post("/v1/searches?wait=20", json=infeasible()).json()
    assert failed["status"] == "failed"
    retry = api.post("/v1/searches?wait=20", json=infeasible())
    assert "x-meshplan-deduplicated" not in retry.headers
    assert retry.json()["id"] != failed["id"]

    slow = small(top_k=SLOW_TOP_K, constraints={"time_limit_s": 16})
    running = api.post("/v1/searches", json=slow).json()
    while_running = api.post("/v1/searches", json=slow)
    assert while_running.headers["x-meshplan-deduplicated"] == running["id"]
    assert api.post(f"/v1/searches/{running['id']}/cancel").json()["status"] == "cancelled"
    after_cancel = api.post("/v1/searches", json=slow).json()
    assert after_cancel["id"] != running["id"]
    api.post(f"/v1/searches/{after_cancel['id']}/cancel")


# ---- webhooks -------------------------------------------------------------------------------
def test_webhook_is_signed_and_retried_with_backoff(api: httpx.Client, receiver: Receiver) -> None:
    url = receiver.url("retry", fail=2)
    created = api.post(
        "/v1/searches?wait=20", json=small(constraints={"time_limit_s": 17}, callback_url=url)
    )
    assert created.status_code == 201, created.text
    search = created.json()
    assert search["callback_url"] == url
    [delivery] = deliveries_settled(api, search["id"])
    assert delivery["status"] == "delivered" and delivery["event"] == "search.succeeded"
    assert delivery["url"] == url and delivery["attempt_count"] == 3
    assert [a["status_code"] for a in delivery["attempts"]] == [500, 500, 204]
    assert [a["number"] for a in delivery["attempts"]] == [1, 2, 3]
    assert delivery["attempts"][0]["error"] == "HTTP 500"  # the status, never the body
    assert FAILURE_BODY.decode() not in api.get(f"/v1/searches/{search['id']}").text
    assert FAILURE_BODY.decode() not in api.get(f"/v1/searches/{search['id']}/deliveries").text
    assert delivery["attempts"][2]["error"] is None and delivery["delivered_at"] is not None

    got = receiver.received("retry")
    assert len(got) == 3
    bodies = {r["body"] for r in got}
    assert len(bodies) == 1  # every attempt sends the same bytes
    body = bodies.pop()
    for request in got:
        headers = {k.lower(): v for k, v in request["headers"].items()}
        assert headers["x-meshplan-signature"] == expected_signature(body)
        assert headers["x-meshplan-delivery"] == delivery["id"]
        assert headers["x-meshplan-event"] == "search.succeeded"
        assert headers["content-type"] == "application/json"
        assert abs(int(headers["x-meshplan-timestamp"]) - time.time()) < 60
    # backoff: base after the first failure, twice that after the second
    gaps = [b["at"] - a["at"] for a, b in zip(got, got[1:], strict=False)]
    assert gaps[0] >= BASE_DELAY_S * 0.95 and gaps[1] >= 2 * BASE_DELAY_S * 0.95, gaps

    payload = json.loads(body)
    assert payload["event"] == "search.succeeded" and payload["delivery_id"] == delivery["id"]
    now = api.get(f"/v1/searches/{search['id']}").json()
    now.pop("deliveries")
    assert payload["search"] == now  # the search as GET shows it (a finished one is stable)
    listed = api.get(f"/v1/searches/{search['id']}/deliveries").json()
    assert listed == {"items": [delivery], "total": 1}


def test_webhook_gives_up_after_the_last_attempt(api: httpx.Client) -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}/hook"
    search = api.post(
        "/v1/searches?wait=20", json=small(constraints={"time_limit_s": 18}, callback_url=dead)
    ).json()
    [delivery] = deliveries_settled(api, search["id"])
    assert delivery["status"] == "failed" and delivery["attempt_count"] == MAX_ATTEMPTS
    assert delivery["delivered_at"] is None and delivery["next_attempt_at"] is None
    assert all(
        a["status_code"] is None and a["error"] == "connect-error" for a in delivery["attempts"]
    )
    times = [datetime.fromisoformat(a["attempted_at"]) for a in delivery["attempts"]]
    gaps = [(b - a).total_seconds() for a, b in zip(times, times[1:], strict=False)]
    # 0.05, 0.1, 0.2 s: doubling from the base delay (the scan loop adds a little)
    for n, gap in enumerate(gaps, start=1):
        assert gap >= BASE_DELAY_S * 2 ** (n - 1) * 0.95, gaps


def test_failed_and_cancelled_searches_send_their_event(
    api: httpx.Client, receiver: Receiver
) -> None:
    failed = api.post(
        "/v1/searches?wait=20", json=infeasible(callback_url=receiver.url("failed"))
    ).json()
    assert failed["status"] == "failed"
    slow = api.post(
        "/v1/searches",
        json=small(
            top_k=SLOW_TOP_K,
            constraints={"time_limit_s": 19},
            callback_url=receiver.url("cancelled"),
        ),
    ).json()
    api.post(f"/v1/searches/{slow['id']}/cancel")
    for search, name in ((failed, "failed"), (slow, "cancelled")):
        [delivery] = deliveries_settled(api, search["id"])
        assert delivery["status"] == "delivered" and delivery["event"] == f"search.{name}"
        [request] = receiver.received(name)
        payload = json.loads(request["body"])
        assert payload["event"] == f"search.{name}"
        assert payload["search"]["id"] == search["id"]
        assert payload["search"]["status"] == name
        assert payload["search"]["finished_at"] is not None
    assert json.loads(receiver.received("failed")[0]["body"])["search"]["error"]["type"].endswith(
        "/no-feasible-plan"
    )


def test_a_deduplicated_request_gets_its_own_webhook(api: httpx.Client, receiver: Receiver) -> None:
    body = small(constraints={"time_limit_s": 20})
    first = api.post("/v1/searches?wait=20", json=body).json()
    second = api.post("/v1/searches", json={**body, "callback_url": receiver.url("dedup")})
    assert second.headers["x-meshplan-deduplicated"] == first["id"]
    [delivery] = deliveries_settled(api, first["id"])
    assert delivery["status"] == "delivered" and delivery["event"] == "search.succeeded"
    [request] = receiver.received("dedup")
    assert json.loads(request["body"])["search"]["id"] == first["id"]


def test_callback_url_must_be_http_and_bounded(api: httpx.Client) -> None:
    for bad in (
        "ftp://example.com/x",
        "example.com/hook",
        "http:///nohost",
        "http://user:pw@example.com/x",
        "http://example.com/" + "a" * 2048,
        "http://exa mple.com/",
    ):
        problem = assert_problem(api.post("/v1/searches", json=small(callback_url=bad)), 422)
        assert error_fields(problem) == ["callback_url"], (bad, problem)


def test_callback_url_needs_a_webhook_secret(tmp_path: Path) -> None:
    with LiveServer(server_settings(tmp_path / "m.db", webhook_secret=None)) as server:
        response = server.client.post(
            "/v1/searches", json=small(callback_url="http://127.0.0.1:9/x")
        )
        problem = assert_problem(response, 422)
        assert error_fields(problem) == ["callback_url"]
        assert "MESHPLAN_WEBHOOK_SECRET" in problem["detail"]


def test_pending_deliveries_resume_after_a_restart(tmp_path: Path, receiver: Receiver) -> None:
    db = tmp_path / "restart.db"
    url = receiver.url("restart", fail=1)
    # first life: the first attempt fails and the next one is due in an hour
    with LiveServer(
        server_settings(db, webhook_base_delay_s=3600.0, webhook_max_delay_s=3600.0)
    ) as server:
        search = server.client.post(
            "/v1/searches?wait=20", json=small(constraints={"time_limit_s": 21}, callback_url=url)
        ).json()
        poll(
            lambda: server.client.get(f"/v1/searches/{search['id']}").json()["deliveries"][0],
            lambda d: d["attempt_count"] == 1,
        )
    assert len(receiver.received("restart")) == 1
    # the hour has passed while the service was down
    engine = make_engine(f"sqlite:///{db}")
    with Session(engine) as session:
        session.execute(update(WebhookDeliveryRecord).values(next_attempt_at=datetime.now(UTC)))
        session.commit()
    engine.dispose()
    with LiveServer(server_settings(db)) as server:
        [delivery] = deliveries_settled(server.client, search["id"])
    assert delivery["status"] == "delivered"
    assert [a["status_code"] for a in delivery["attempts"]] == [500, 204]
    assert len(receiver.received("restart")) == 2


# ---- Server-Sent Events -------------------------------------------------------------------
def read_events(
    client: httpx.Client, path: str, headers: dict[str, str] | None = None
) -> tuple[httpx.Response, list[dict[str, Any]]]:
    """Read an SSE stream to its end: messages as {"event", "id", "data", "comment"}."""
    events: list[dict[str, Any]] = []
    with client.stream("GET", path, headers=headers, timeout=30) as response:
        if response.status_code != 200:
            response.read()
            return response, events
        current: dict[str, Any] = {}
        for line in response.iter_lines():
            if line == "":
                if current:
                    events.append(current)
                current = {}
            elif line.startswith(":"):
                events.append({"comment": line[1:].strip()})
            else:
                field, _, value = line.partition(":")
                value = value[1:] if value.startswith(" ") else value
                current[field] = current[field] + "\n" + value if field in current else value
    return response, events


def test_events_stream_progress_then_done(api: httpx.Client) -> None:
    search = api.post(
        "/v1/searches", json=small(top_k=SLOW_TOP_K, constraints={"time_limit_s": 22})
    ).json()
    response, events = read_events(api, f"/v1/searches/{search['id']}/events")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.headers["cache-control"] == "no-cache"
    messages = [e for e in events if "event" in e]
    progress = [json.loads(e["data"]) for e in messages if e["event"] == "progress"]
    assert [e["event"] for e in messages][-1] == "done"
    assert {"status", "progress"} == set(progress[0])
    # every change is sent once: consecutive progress events differ
    states = [(p["status"], p["progress"]["evaluated"], p["progress"]["total"]) for p in progress]
    assert all(a != b for a, b in zip(states, states[1:], strict=False))
    evaluated = [p["progress"]["evaluated"] for p in progress if p["status"] == "running"]
    assert evaluated == sorted(evaluated) and len(set(evaluated)) >= 3, states
    assert [m["id"] for m in messages if m["event"] == "progress"] == [
        f"{s}.{e}.{t}" for s, e, t in states
    ]
    # nothing changes during the slow start: keep-alive comments fill the silence
    assert any(e.get("comment") == "keep-alive" for e in events)
    done = json.loads(messages[-1]["data"])
    assert done["status"] == "succeeded" and done["id"] == search["id"]
    assert done["progress"]["evaluated"] == done["progress"]["total"] > 0
    assert done == api.get(f"/v1/searches/{search['id']}").json()


def test_events_of_a_finished_search_end_at_once(api: httpx.Client) -> None:
    search = api.post("/v1/searches?wait=20", json=small(constraints={"time_limit_s": 23})).json()
    started = time.monotonic()
    _, events = read_events(api, f"/v1/searches/{search['id']}/events")
    assert time.monotonic() - started < 2
    [message] = [e for e in events if "event" in e]
    assert message["event"] == "done" and message["id"] == "done"
    assert json.loads(message["data"])["status"] == "succeeded"


def test_events_resume_after_last_event_id(api: httpx.Client, live: LiveServer) -> None:
    resumed, fresh = (
        api.post(
            "/v1/searches", json=small(top_k=SLOW_TOP_K, constraints={"time_limit_s": limit})
        ).json()
        for limit in (24, 25)
    )
    for search_id in (resumed["id"], fresh["id"]):  # both in their slow start: running
        state = poll(
            lambda: api.get(f"/v1/searches/{search_id}").json(),  # noqa: B023
            lambda s: s["status"] != "queued",
        )
        assert state["status"] == "running" and state["progress"] == {"evaluated": 0, "total": None}
    seen = "running.0.None"
    streams: dict[str, list[str]] = {}

    def read(search_id: str, headers: dict[str, str]) -> None:
        with httpx.Client(base_url=live.base_url) as client:
            _, events = read_events(client, f"/v1/searches/{search_id}/events", headers)
        streams[search_id] = [e["id"] for e in events if "event" in e]

    readers = [
        threading.Thread(target=read, args=(resumed["id"], {"Last-Event-ID": seen})),
        threading.Thread(target=read, args=(fresh["id"], {})),
    ]
    for reader in readers:
        reader.start()
    for reader in readers:
        reader.join(30)
    assert seen not in streams[resumed["id"]] and streams[resumed["id"]][-1] == "done"
    # without the header the same state is the first event
    assert streams[fresh["id"]][0] == seen and streams[fresh["id"]][-1] == "done"


def test_a_stream_ends_after_its_maximum_duration_and_resumes(
    tmp_path: Path, slow_marked_searches: None
) -> None:
    settings = server_settings(tmp_path / "sse.db", sse_max_duration_s=0.3)
    with LiveServer(settings) as server:
        body = small(top_k=SLOW_TOP_K, constraints={"time_limit_s": 26})
        search = server.client.post("/v1/searches", json=body).json()
        path = f"/v1/searches/{search['id']}/events"
        started = time.monotonic()
        _, first = read_events(server.client, path)
        assert time.monotonic() - started < SLOW_START_S  # cut during the slow start
        ids = [e["id"] for e in first if "event" in e]
        assert ids and "done" not in ids
        last_id = ids[-1]
        resumed: list[str] = []
        for _ in range(40):  # reconnect as EventSource does, until done
            _, events = read_events(server.client, path, {"Last-Event-ID": last_id})
            got = [e["id"] for e in events if "event" in e]
            resumed += got
            if got and got[-1] == "done":
                break
            last_id = got[-1] if got else last_id
        assert resumed[-1] == "done"
        assert ids[-1] not in resumed  # the state already seen was not sent again


def test_events_of_an_unknown_search_are_a_404(api: httpx.Client) -> None:
    path = "/v1/searches/00000000-0000-0000-0000-000000000000/events"
    response, _ = read_events(api, path)
    assert_problem(response, 404, path=path)


# ---- ETags --------------------------------------------------------------------------------
def test_gets_carry_strong_etags_and_answer_304(api: httpx.Client) -> None:
    search = api.post("/v1/searches?wait=20", json=small(constraints={"time_limit_s": 26})).json()
    plans = api.get(f"/v1/searches/{search['id']}/plans").json()["items"]
    paths = [
        "/v1/hardware",
        "/v1/hardware/h100-sxm",
        "/v1/model-presets",
        f"/v1/searches/{search['id']}",
        f"/v1/searches/{search['id']}/plans",
        f"/v1/plans/{plans[0]['id']}",
        "/v1/searches?status=succeeded",
    ]
    for path in paths:
        response = api.get(path)
        assert response.status_code == 200, path
        etag = response.headers["etag"]
        # strong (no W/), and a function of the body bytes only
        assert etag == '"' + hashlib.sha256(response.content).hexdigest() + '"', path
        assert response.headers["cache-control"] == "no-cache"
        for header in (etag, f"W/{etag}", f'"other", {etag}', "*"):
            cached = api.get(path, headers={"If-None-Match": header})
            assert cached.status_code == 304, (path, header)
            assert cached.content == b"" and cached.headers["etag"] == etag
            assert "content-type" not in cached.headers
        stale = api.get(path, headers={"If-None-Match": '"something-else"'})
        assert stale.status_code == 200 and stale.content == response.content


def test_an_etag_changes_with_the_resource(api: httpx.Client) -> None:
    listing = api.get("/v1/searches?status=succeeded&limit=500")
    etag = listing.headers["etag"]
    api.post("/v1/searches?wait=20", json=small(constraints={"time_limit_s": 27}))
    after = api.get("/v1/searches?status=succeeded&limit=500", headers={"If-None-Match": etag})
    assert after.status_code == 200 and after.headers["etag"] != etag
    assert after.json()["total"] >= listing.json()["total"] + 1
    # errors and non-GETs are not tagged
    assert "etag" not in api.get("/v1/searches/nope").headers
    assert "etag" not in api.post("/v1/searches", json={}).headers


# ---- cursor pagination -----------------------------------------------------------------------
def walk(
    api: httpx.Client, path: str, limit: int, between: Callable[[], None] | None = None
) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    cursor: str | None = None
    for _ in range(1000):
        sep = "&" if "?" in path else "?"
        url = f"{path}{sep}limit={limit}" + (f"&cursor={cursor}" if cursor else "")
        page = api.get(url).json()
        assert len(page["items"]) <= limit
        items.extend(page["items"])
        cursor = page["next_cursor"]
        if cursor is None:
            return items
        assert len(page["items"]) == limit
        if between is not None:
            between()
    raise AssertionError("no last page")


def test_cursor_pages_walk_every_search_once_under_inserts(api: httpx.Client) -> None:
    for n in range(5):
        api.post("/v1/searches", json=small(constraints={"time_limit_s": 30 + n}))
    everything = api.get("/v1/searches?limit=500").json()
    expected = [s["id"] for s in everything["items"]]
    assert everything["total"] == len(expected) >= 7 and everything["next_cursor"] is None
    inserted: list[str] = []

    def insert() -> None:
        body = small(constraints={"time_limit_s": 40 + len(inserted)})
        inserted.append(api.post("/v1/searches", json=body).json()["id"])

    walked = [s["id"] for s in walk(api, "/v1/searches", 3, between=insert)]
    assert walked == expected  # each exactly once, newest first, none of the new ones
    assert len(inserted) >= 2 and not set(inserted) & set(walked)
    # offset still works and agrees with the cursor order
    assert [s["id"] for s in api.get("/v1/searches?limit=2&offset=1").json()["items"]] == [
        s["id"] for s in api.get("/v1/searches?limit=500").json()["items"][1:3]
    ]


def test_cursor_pages_of_plans(api: httpx.Client) -> None:
    search = api.post("/v1/searches?wait=20", json=small(constraints={"time_limit_s": 28})).json()
    path = f"/v1/searches/{search['id']}/plans"
    full = api.get(path).json()
    assert full["total"] == 7 and full["next_cursor"] is None
    pages = walk(api, path, 3)
    assert [p["rank"] for p in pages] == list(range(1, 8))
    assert pages == full["items"]
    first = api.get(path + "?limit=3").json()
    assert first["total"] == 7 and len(first["items"]) == 3


def test_bad_cursors_are_422(api: httpx.Client) -> None:
    search = api.post("/v1/searches?wait=20", json=small(constraints={"time_limit_s": 29})).json()
    plans_cursor = api.get(f"/v1/searches/{search['id']}/plans?limit=1").json()["next_cursor"]
    searches_cursor = api.get("/v1/searches?limit=1").json()["next_cursor"]
    for path in (
        "/v1/searches?cursor=%%%",
        "/v1/searches?cursor=bm9wZQ",
        f"/v1/searches?cursor={plans_cursor}",
        f"/v1/searches/{search['id']}/plans?cursor={searches_cursor}",
    ):
        problem = assert_problem(api.get(path), 422)
        assert error_fields(problem) == ["cursor"], path
    problem = assert_problem(api.get(f"/v1/searches?cursor={searches_cursor}&offset=2"), 422)
    assert error_fields(problem) == ["offset"]
