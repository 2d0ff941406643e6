"""Helpers shared by the app tests (not a test module)."""

from __future__ import annotations

import time
from collections.abc import Callable
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


def wait_until(
    client: Any, search_id: str, cond: Callable[[dict[str, Any]], bool], timeout_s: float = 60.0
) -> dict[str, Any]:
    """Poll a search until `cond(body)` holds; fails the test after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        body: dict[str, Any] = client.get(f"/v1/searches/{search_id}").json()
        if cond(body):
            return body
        if time.monotonic() > deadline:
            raise AssertionError(f"{search_id}: condition not reached in {timeout_s} s: {body}")
        time.sleep(0.05)


SLOW_SEARCH: dict[str, Any] = {
    "model": {"preset": "deepseek-v3"},
    "cluster": {"node_groups": [{"accelerator": "h100-sxm", "num_nodes": 512, "gpus_per_node": 8}]},
    "workload": {
        "kind": "training",
        "global_batch_size": 16384,
        "sequence_length": 4096,
        "precision": "bf16",
    },
    "constraints": {"time_limit_s": 60},
    "top_k": 5,
}
"""A search that runs for about 6 s of one core (a large MoE degree space: 4.5M candidates,
480 MB), to be killed while it runs."""

MEDIUM_SEARCH: dict[str, Any] = {
    "model": {"preset": "deepseek-v3"},
    "cluster": {"node_groups": [{"accelerator": "h100-sxm", "num_nodes": 128, "gpus_per_node": 8}]},
    "workload": {
        "kind": "training",
        "global_batch_size": 8192,
        "sequence_length": 4096,
        "precision": "bf16",
    },
    "top_k": 3,
}
"""A search that runs for about 4.4 s of one core (3.1M candidates, 390 MB), to be
interrupted and then run to its end. (Mixtral-8x7B on 4 × 8 H100 took 5 s before the
search queued each degree tuple's context-parallel groups as one entry; it takes 0.65 s
now, and the search it stood for finished before the signal.)"""

TINY_SEARCH: dict[str, Any] = {
    "model": {"preset": "llama3-8b"},
    "cluster": {"node_groups": [{"accelerator": "h100-sxm", "num_nodes": 1, "gpus_per_node": 8}]},
    "workload": {
        "kind": "training",
        "global_batch_size": 64,
        "sequence_length": 2048,
        "precision": "bf16",
    },
    "top_k": 3,
}
