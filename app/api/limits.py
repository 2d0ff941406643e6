"""Request-rate limits: a token bucket per client (API key id, or client address with auth
off), kept in memory per process, and the 429 / 503 problems of every limit.

Token bucket (the classic traffic-shaping scheme, e.g. RFC 2697's committed burst): a
bucket holds up to `burst` tokens and gains `rate` tokens a second; a request takes one, and
a request that finds less than one is refused with the seconds until one is back as
`Retry-After` (RFC 9110 §10.2.3, whole seconds, rounded up)."""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict

from specs.errors import PlannerError

MAX_BUCKETS = 100_000
"""Buckets kept at most; the least recently used go first (a full bucket is the state of a
forgotten one, so forgetting never tightens a limit)."""


class RetryLater(PlannerError):
    """Base of the limit problems: they carry a `Retry-After` header."""

    def __init__(self, detail: str, *, retry_after_s: float, **extensions: object) -> None:
        seconds = max(1, math.ceil(retry_after_s))
        super().__init__(detail, retry_after_s=seconds, **extensions)
        self.headers = {"Retry-After": str(seconds)}


class RateLimited(RetryLater):
    """A client sent requests faster than its rate (429)."""

    problem_type = "rate-limited"
    title = "Too many requests"
    status = 429


class TenantQuotaExceeded(RetryLater):
    """A tenant has as many queued and running searches as it may (429: its own quota)."""

    problem_type = "tenant-search-quota"
    title = "Too many active searches"
    status = 429


class QueueFull(RetryLater):
    """The service's search queue is full, whoever asks (503)."""

    problem_type = "queue-full"
    title = "Search queue full"
    status = 503


class TokenBuckets:
    """One token bucket per client key; thread-safe."""

    def __init__(self, rate_per_s: float, burst: int) -> None:
        self.rate = rate_per_s
        self.burst = float(burst)
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()
        self._lock = threading.Lock()

    def take(self, client: str, now: float | None = None) -> float:
        """Take one token of `client`'s bucket: 0.0 when granted, else the seconds until a
        token is back (nothing is taken)."""
        now = time.monotonic() if now is None else now
        with self._lock:
            tokens, stamp = self._buckets.pop(client, (self.burst, now))
            tokens = min(self.burst, tokens + (now - stamp) * self.rate)
            wait = 0.0
            if tokens >= 1.0:
                tokens -= 1.0
            else:
                wait = (1.0 - tokens) / self.rate
            self._buckets[client] = (tokens, now)
            while len(self._buckets) > MAX_BUCKETS:
                self._buckets.popitem(last=False)
            return wait
