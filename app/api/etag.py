"""Strong ETags and `If-None-Match` for the JSON answers of GET requests (RFC 9110 §8.8.3,
§13.1.2, §15.4.5).

`ETagMiddleware` (pure ASGI) buffers the body of a `200` `application/json` answer to a GET,
tags it with `ETag: "<hex SHA-256 of the body bytes>"` (the same bytes → the same tag, so it
is a strong validator) and `Cache-Control: no-cache` (caches must revalidate: searches
change state), and answers `304 Not Modified` without a body when `If-None-Match` names that
tag (weak comparison, as §13.1.2 requires for If-None-Match; `*` matches any). Other
answers pass through untouched: other methods and statuses, non-JSON types (the
`text/event-stream` of `/events` streams as it comes), and bodies above `max_bytes`, which
are forwarded as soon as they pass the limit, without a tag.
"""

from __future__ import annotations

import hashlib
import re

from starlette.types import ASGIApp, Message, Receive, Scope, Send

DEFAULT_MAX_BYTES = 8 * 1024 * 1024
_TAG = re.compile(r'(?:W/)?("[\x21\x23-\x7e\x80-\xff]*")')
_DROP_ON_304 = (b"content-length", b"content-type")


def strong_etag(body: bytes) -> str:
    """`"<sha256 hex>"` of the body bytes."""
    return '"' + hashlib.sha256(body).hexdigest() + '"'


def if_none_match_matches(header: str | None, etag: str) -> bool:
    """Whether an If-None-Match value names `etag` (weak comparison: `W/` is ignored)."""
    if header is None:
        return False
    value = header.strip()
    if value == "*":
        return True
    return any(tag == etag for tag in _TAG.findall(value))


class ETagMiddleware:
    """See the module docstring."""

    def __init__(
        self, app: ASGIApp, max_bytes: int = DEFAULT_MAX_BYTES, cache_control: str = "no-cache"
    ) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.cache_control = cache_control.encode("latin-1")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") != "GET":
            await self.app(scope, receive, send)
            return
        if_none_match = None
        for key, value in scope.get("headers", []):
            if key == b"if-none-match":
                if_none_match = value.decode("latin-1")
        start: Message | None = None
        chunks: list[bytes] = []
        size = 0
        passthrough = False

        async def tagging_send(message: Message) -> None:
            nonlocal start, size, passthrough
            if passthrough:
                await send(message)
                return
            if message["type"] == "http.response.start":
                headers = message.get("headers", [])
                content_type = next(
                    (v for k, v in headers if k.lower() == b"content-type"), b""
                ).lower()
                has_etag = any(k.lower() == b"etag" for k, _ in headers)
                if (
                    message["status"] != 200
                    or not content_type.startswith(b"application/json")
                    or has_etag
                ):
                    passthrough = True
                    await send(message)
                    return
                start = message
                return
            if message["type"] != "http.response.body" or start is None:
                await send(message)
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            more = bool(message.get("more_body", False))
            if size > self.max_bytes:  # too big to hold: forward what we have, untagged
                passthrough = True
                await send(start)
                await send(
                    {"type": "http.response.body", "body": b"".join(chunks), "more_body": more}
                )
                return
            if more:
                return
            body = b"".join(chunks)
            etag = strong_etag(body)
            headers = [(k, v) for k, v in start.get("headers", [])]
            headers.append((b"etag", etag.encode("latin-1")))
            if not any(k.lower() == b"cache-control" for k, _ in headers):
                headers.append((b"cache-control", self.cache_control))
            if if_none_match_matches(if_none_match, etag):
                headers = [(k, v) for k, v in headers if k.lower() not in _DROP_ON_304]
                await send({"type": "http.response.start", "status": 304, "headers": headers})
                await send({"type": "http.response.body", "body": b""})
                return
            await send({**start, "headers": headers})
            await send({"type": "http.response.body", "body": body})

        await self.app(scope, receive, tagging_send)
