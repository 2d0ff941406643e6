"""Signed completion webhooks of searches, delivered from the API process.

A search created with `callback_url` (or an identical request deduplicated onto it) gets a
row in `webhook_deliveries` in state `waiting`. When the search finishes (final status and
`finished_at` stored), the `WebhookDispatcher` fixes the delivery's JSON body

    {"event": "search.succeeded" | "search.failed" | "search.cancelled",
     "delivery_id": "<id>", "search": <the search as GET /v1/searches/{id} shows it,
                                          without `deliveries`>}

and POSTs it with

    Content-Type: application/json
    X-Meshplan-Event: <event>
    X-Meshplan-Delivery: <delivery id>   (the same on every retry: receivers dedupe on it)
    X-Meshplan-Timestamp: <Unix seconds of this attempt>
    X-Meshplan-Signature: sha256=<hex HMAC-SHA256 of the raw body bytes, key = the
                          MESHPLAN_WEBHOOK_SECRET setting (UTF-8)>

The signature covers the body only (as the issue asks); the body carries the search's
`finished_at`, so a receiver can refuse stale replays by comparing it, or the timestamp
header, with its clock. HMAC is RFC 2104; `verify_signature` compares in constant time.

Targets: `app.services.webhook_targets` checks the URL again before every attempt (https,
public addresses only unless allow-listed) and pins the connection to the checked address;
redirects are not followed. An attempt records its status code and a short error class
(`HTTP 500`, `timeout`, `connect-error`, `refused (<rule>): ...`), never the receiver's body.

Retries: a non-2xx answer, a timeout or a connection error schedules the next attempt after
`webhook_base_delay_s · 2^(n−1)` seconds (n = failed attempts so far), capped at
`webhook_max_delay_s` — the usual exponential backoff (RFC 6298 §5.5 doubles the
retransmission timer the same way); after `webhook_max_attempts` attempts the delivery is
`failed`. Every attempt is a `webhook_attempts` row.

Everything lives in the database, so deliveries survive restarts: at start the dispatcher
picks up pending deliveries (and waiting ones whose search finished while it was down). A
sender claims a due delivery with a conditional update that pushes `next_attempt_at` out by
a lease, so two threads or replicas never send the same attempt; a sender that dies leaves
the delivery due again when the lease ends (at-least-once delivery).

The dispatcher is one background thread (scanning) plus a small thread pool (sending, with
httpx timeouts): request handling never waits for a receiver. `notify()` (called by the
search runner when a search ends) wakes it at once; otherwise it scans every
`webhook_poll_interval_s`, which also catches searches finished by other replicas.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from sqlalchemy.engine import Engine
from sqlmodel import Session

from app import __version__
from app.core.config import Settings
from app.db import crud
from app.db.models import SearchRecord, WebhookDeliveryRecord
from app.services.webhook_targets import RefusedTarget, pin_target

logger = logging.getLogger(__name__)

SIGNATURE_HEADER = "X-Meshplan-Signature"
TIMESTAMP_HEADER = "X-Meshplan-Timestamp"
DELIVERY_HEADER = "X-Meshplan-Delivery"
EVENT_HEADER = "X-Meshplan-Event"
SIGNATURE_PREFIX = "sha256="
_ERROR_EXCERPT = 300
_SEND_WORKERS = 4

Renderer = Callable[[Session, SearchRecord], dict[str, Any]]
"""The public JSON of a search (what GET /v1/searches/{id} answers)."""


def event_type(status: str) -> str:
    """`search.<final status>`."""
    return f"search.{status}"


def encode_body(payload: dict[str, Any]) -> bytes:
    """The exact bytes sent (and signed): compact JSON with sorted keys."""
    return json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()


def sign(secret: str, body: bytes) -> str:
    """`sha256=` + hex HMAC-SHA256 (RFC 2104) of `body` keyed with `secret` (UTF-8)."""
    digest = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return SIGNATURE_PREFIX + digest


def verify_signature(secret: str, body: bytes, header: str | None) -> bool:
    """True when `header` is the signature of `body` (constant-time comparison)."""
    if not header:
        return False
    return hmac.compare_digest(sign(secret, body), header.strip())


def backoff_delay_s(failures: int, base_s: float, cap_s: float) -> float:
    """Seconds to wait after the `failures`-th failed attempt: base · 2^(failures−1), capped."""
    if failures < 1:
        return 0.0
    return float(min(cap_s, base_s * 2.0 ** min(failures - 1, 60)))


def classify_status(status_code: int) -> str:
    """The error of a non-2xx answer: its status only, never the receiver's body (a body
    shown in the API would make webhooks an SSRF oracle)."""
    if 300 <= status_code < 400:
        return f"HTTP {status_code} (redirect not followed)"
    return f"HTTP {status_code}"


def classify_exception(exc: httpx.HTTPError) -> str:
    """A short class of a transport failure (timeout, connect, TLS, protocol), no details."""
    if isinstance(exc, httpx.TimeoutException):
        return "timeout"
    if isinstance(exc, httpx.ConnectError):
        return "tls-error" if "SSL" in str(exc) or "certificate" in str(exc) else "connect-error"
    if isinstance(exc, httpx.RemoteProtocolError | httpx.LocalProtocolError):
        return "protocol-error"
    if isinstance(exc, httpx.NetworkError):
        return "network-error"
    return "transport-error"


def _aware(value: datetime) -> datetime:
    return value if value.tzinfo else value.replace(tzinfo=UTC)


class WebhookDispatcher:
    """Delivers completion webhooks in background threads of the API process."""

    def __init__(self, settings: Settings, engine: Engine, render: Renderer) -> None:
        self.settings = settings
        self.engine = engine
        self.render = render
        secret = settings.webhook_secret
        self._secret = secret.get_secret_value() if secret is not None else ""
        self._warned_no_secret = False
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._client: httpx.Client | None = None
        self._in_flight: set[str] = set()
        self._lock = threading.Lock()
        timeout = settings.webhook_timeout_s
        # connect, write, read and pool time-outs can each run out once
        self._lease = timedelta(seconds=4 * timeout + 30)

    # ---- life cycle ----
    def start(self) -> None:
        self._stop.clear()
        self._client = httpx.Client(
            timeout=httpx.Timeout(self.settings.webhook_timeout_s),
            follow_redirects=False,
            # no connection reuse: each attempt connects to the address just checked
            limits=httpx.Limits(max_keepalive_connections=0),
            headers={"User-Agent": f"meshplan-webhooks/{__version__}"},
        )
        self._executor = ThreadPoolExecutor(
            max_workers=_SEND_WORKERS, thread_name_prefix="meshplan-webhook"
        )
        self._thread = threading.Thread(
            target=self._loop, name="meshplan-webhook-dispatcher", daemon=True
        )
        self._thread.start()

    def notify(self, _search_id: str | None = None) -> None:
        """A search finished (or a delivery changed): scan now."""
        self._wake.set()

    def stop(self) -> None:
        """Stop scanning and wait for attempts in flight (each bounded by the timeout)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None
        if self._client is not None:
            self._client.close()
            self._client = None

    # ---- the scanning loop ----
    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            try:
                self.run_once()
                delay = self._seconds_to_next_due()
            except Exception:
                logger.exception("webhook dispatcher scan failed")
                delay = self.settings.webhook_poll_interval_s
            self._wake.wait(delay)

    def run_once(self) -> int:
        """Activate deliveries of finished searches and start every due attempt; returns the
        attempts started."""
        self._activate()
        return self._dispatch_due()

    def _activate(self) -> None:
        with Session(self.engine, expire_on_commit=False) as session:
            for delivery, search in crud.deliveries_to_activate(session=session):
                event = event_type(search.status)
                public = self.render(session, search)
                public.pop("deliveries", None)
                payload = {"event": event, "delivery_id": delivery.id, "search": public}
                crud.activate_delivery(
                    session=session,
                    delivery_id=delivery.id,
                    event=event,
                    payload=payload,
                    now=datetime.now(UTC),
                )

    def _dispatch_due(self) -> int:
        executor = self._executor
        if executor is None:
            return 0
        if not self._secret:
            # deliveries stored while a secret was set wait for one: never send unsigned
            if not self._warned_no_secret:
                self._warned_no_secret = True
                logger.warning("MESHPLAN_WEBHOOK_SECRET is not set: webhooks are not sent")
            return 0
        started = 0
        with Session(self.engine, expire_on_commit=False) as session:
            now = datetime.now(UTC)
            for delivery in crud.due_deliveries(session=session, now=now):
                with self._lock:
                    if delivery.id in self._in_flight:
                        continue
                if not crud.claim_delivery(
                    session=session, delivery=delivery, now=now, lease_until=now + self._lease
                ):
                    continue  # another sender took it
                with self._lock:
                    self._in_flight.add(delivery.id)
                try:
                    executor.submit(self._attempt, delivery)
                except RuntimeError:  # shutting down: the lease runs out, a restart resends
                    with self._lock:
                        self._in_flight.discard(delivery.id)
                    break
                started += 1
        return started

    def _seconds_to_next_due(self) -> float:
        poll = self.settings.webhook_poll_interval_s
        if not self._secret:
            return poll
        with Session(self.engine) as session:
            due = crud.next_delivery_due(session=session)
        if due is None:
            return poll
        # a floor: a due delivery still queued for a local sender must not spin the loop
        return max(0.02, min(poll, (_aware(due) - datetime.now(UTC)).total_seconds()))

    # ---- one attempt ----
    def _attempt(self, delivery: WebhookDeliveryRecord) -> None:
        try:
            self._send(delivery)
        except Exception:
            logger.exception("webhook delivery %s: attempt failed unexpectedly", delivery.id)
        finally:
            with self._lock:
                self._in_flight.discard(delivery.id)
            self._wake.set()

    def _send(self, delivery: WebhookDeliveryRecord) -> None:
        client = self._client
        assert client is not None
        body = encode_body(delivery.payload or {})
        headers = {
            "Content-Type": "application/json",
            EVENT_HEADER: delivery.event or "",
            DELIVERY_HEADER: delivery.id,
            TIMESTAMP_HEADER: str(int(time.time())),
            SIGNATURE_HEADER: sign(self._secret, body),
        }
        attempted_at = datetime.now(UTC)
        started = time.perf_counter()
        status_code: int | None = None
        error: str | None
        try:
            target = pin_target(delivery.url, self.settings)
        except RefusedTarget as exc:
            target = None
            error = f"refused ({exc.rule}): {exc.message}"[:_ERROR_EXCERPT]
        if target is not None:
            try:
                response = client.post(
                    target.url,
                    content=body,
                    headers={**headers, **target.headers},
                    extensions=target.extensions,
                )
                status_code = response.status_code
                error = None if 200 <= status_code < 300 else classify_status(status_code)
            except httpx.HTTPError as exc:
                error = classify_exception(exc)
        duration = time.perf_counter() - started
        number = delivery.attempt_count + 1
        next_at: datetime | None = None
        if error is not None and number < self.settings.webhook_max_attempts:
            delay = backoff_delay_s(
                number, self.settings.webhook_base_delay_s, self.settings.webhook_max_delay_s
            )
            next_at = datetime.now(UTC) + timedelta(seconds=delay)
        with Session(self.engine) as session:
            status = crud.record_attempt(
                session=session,
                delivery_id=delivery.id,
                number=number,
                attempted_at=attempted_at,
                duration_s=duration,
                status_code=status_code,
                error=error,
                next_attempt_at=next_at,
            )
        if error is not None:
            logger.info(
                "webhook delivery %s attempt %d to %s: %s (now %s)",
                delivery.id,
                number,
                delivery.url,
                error,
                status,
            )
