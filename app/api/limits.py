"""Request-rate limits: a token bucket per client (API key id, or client address with auth
off) and the 429 / 503 problems of every limit.

Buckets live in memory per process (`TokenBuckets`), or, for several replicas behind one
load balancer, in Redis (`RedisTokenBuckets`, `MESHPLAN_RATE_LIMIT_REDIS_URL`): one bucket
per client for all replicas, refilled on Redis's clock (`TIME`), so replicas' clocks do not
matter, and updated atomically by one Lua script (Redis runs a script without interleaving
other commands). When Redis does not answer within `timeout_s`, a replica falls back to its
own in-memory bucket and logs it: losing the shared limit must not refuse every request.

Token bucket (the classic traffic-shaping scheme, e.g. RFC 2697's committed burst): a
bucket holds up to `burst` tokens and gains `rate` tokens a second; a request takes one, and
a request that finds less than one is refused with the seconds until one is back as
`Retry-After` (RFC 9110 §10.2.3, whole seconds, rounded up)."""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import OrderedDict
from typing import Any, Protocol

import redis

from specs.errors import PlannerError

logger = logging.getLogger(__name__)

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


class RateBuckets(Protocol):
    """What a request takes a token from (`TokenBuckets`, `RedisTokenBuckets`)."""

    rate: float
    burst: float

    def take(self, client: str) -> float:
        """0.0 when granted, else the seconds until a token is back."""
        ...


_TAKE_SCRIPT = """
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000
local held = redis.call('HMGET', KEYS[1], 'tokens', 'stamp')
local tokens = tonumber(held[1]) or burst
local stamp = tonumber(held[2]) or now
tokens = math.min(burst, tokens + math.max(0, now - stamp) * rate)
local wait = 0
if tokens >= 1 then tokens = tokens - 1 else wait = (1 - tokens) / rate end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'stamp', tostring(now))
redis.call('EXPIRE', KEYS[1], math.ceil(burst / rate) + 1)
return tostring(wait)
"""
"""One take, atomically: refill by the time since the last take, take a token if there is
one, else answer the wait. Numbers go back as strings (Redis turns a Lua number reply into
an integer). The key expires once the bucket would be full again: a forgotten bucket is a
full one, so expiry never tightens a limit."""


class RedisTokenBuckets:
    """Token buckets shared by every replica through Redis at `url`; thread-safe (redis-py
    pools its connections). Falls back to an in-memory `TokenBuckets` while Redis fails."""

    def __init__(
        self,
        url: str,
        rate_per_s: float,
        burst: int,
        *,
        prefix: str = "meshplan:rate:",
        timeout_s: float = 0.25,
    ) -> None:
        self.rate = rate_per_s
        self.burst = float(burst)
        self.prefix = prefix
        self._client: Any = redis.Redis.from_url(
            url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s
        )
        self._take = self._client.register_script(_TAKE_SCRIPT)
        self.fallback = TokenBuckets(rate_per_s, burst)
        self.failures = 0
        self._warned_at = -math.inf

    def take(self, client: str) -> float:
        try:
            wait = float(self._take(keys=[self.prefix + client], args=[self.rate, self.burst]))
        except redis.RedisError as exc:
            self.failures += 1
            now = time.monotonic()
            if now - self._warned_at >= 60.0:
                self._warned_at = now
                logger.warning(
                    "rate limit store unavailable (%s: %s); limiting per process meanwhile",
                    type(exc).__name__,
                    exc,
                )
            return self.fallback.take(client)
        return wait

    def close(self) -> None:
        self._client.close()
