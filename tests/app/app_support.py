"""Helpers shared by the app tests (not a test module)."""

from __future__ import annotations

import time
from typing import Any

PROBLEM_JSON = "application/problem+json"
PROBLEM_MEMBERS = ("type", "title", "status", "detail", "instance")


def assert_problem(response: Any, status: int, *, path: str | None = None) -> dict[str, Any]:
    """The response is an RFC 9457 problem of `status` with the five standard members."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith(PROBLEM_JSON)
    body: dict[str, Any] = response.json()
    for member in PROBLEM_MEMBERS:
        assert member in body, (member, body)
    assert body["status"] == status
    assert body["type"].startswith("https://meshplan.dev/problems/")
    assert "Traceback" not in response.text
    if path is not None:
        assert body["instance"] == path
    return body


def error_fields(body: dict[str, Any]) -> list[str]:
    return [e["field"] for e in body.get("errors", [])]


def wait_for(client: Any, search_id: str, timeout_s: float = 30.0) -> dict[str, Any]:
    """Poll a search until it leaves queued/running."""
    deadline = time.monotonic() + timeout_s
    while True:
        body: dict[str, Any] = client.get(f"/v1/searches/{search_id}").json()
        if body["status"] not in ("queued", "running") or time.monotonic() > deadline:
            return body
        time.sleep(0.05)
