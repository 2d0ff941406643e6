"""schemathesis over the service's own OpenAPI document, in process (ASGI, no network): every
operation with generated valid and invalid inputs, all checks (no 5xx, responses that match
their documented schema and status codes, content types, ...), then the stateful phase
(chains of calls along the document's links, app/api/links.py, over the operations they
join) — with bounded searches (1 s limits, thread
executor) and a few examples per operation so the module stays within about two minutes on
two cores (the stateful test alone about 30 s).

Plus the regressions the fuzzer found, each pinned by a plain test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from app_support import assert_problem, error_fields
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from schemathesis.specs.openapi.checks import negative_data_rejection, positive_data_acceptance

from app.api.links import LINKS
from app.core.config import Settings
from app.main import create_app

EXAMPLES_PER_OPERATION = 5
EXCLUDED_CHECKS = [positive_data_acceptance, negative_data_rejection]
"""Every check runs (no 5xx, response schemas, status codes, content types, headers, Allow
on 405, ...) except two about *which* inputs are accepted: the service refuses, with a 422
naming the rule, inputs that the JSON schema cannot describe (a tensor degree that does not
divide the heads, a model without dimensions when no preset is named, physics floors), and
it accepts pydantic's lax JSON coercions (`false` for 0, `"2"` for 2) on purpose."""


FUZZ_KEY = "fuzz-admin-key-for-tests"
STATEFUL_WAIT_S = 30.0
"""`?wait` of the stateful phase's searches: far beyond their 1 s of work, so that every one
has finished when its creation answers. An answer that depended on timing (a `202` where
the previous run saw a `201`, a `429` while an earlier search still ran) would change which
links the chain can follow, and Hypothesis refuses a data generation that differs between
runs (`FlakyStrategyDefinition`, seen in CI under load with `?wait=1`)."""
AUTH = {"Authorization": f"Bearer {FUZZ_KEY}"}


def _settings(db: Path) -> Settings:
    return Settings(
        database_url=f"sqlite:///{db}",
        search_executor="thread",
        search_workers=2,
        default_search_time_limit_s=1.0,
        max_search_time_limit_s=1.0,
        max_wait_s=STATEFUL_WAIT_S,
        max_top_k=5,
        progress_interval_s=0.05,
        # keys on, as an organisation runs it: the fuzzer also checks that requests without
        # (or with a wrong) key are refused; its own calls carry the bootstrap admin key
        auth="on",
        admin_key=FUZZ_KEY,
        rate_limit_per_s=1e6,
        rate_limit_burst=1_000_000,
    )


_DB = Path("/tmp") / f"meshplan-fuzz-{__import__('os').getpid()}.db"
APP = create_app(_settings(_DB))
schema = schemathesis.openapi.from_asgi("/openapi.json", APP)


@pytest.fixture(scope="module", autouse=True)
def started() -> Iterator[None]:
    """Run the app's lifespan (migrations, runner) once; schemathesis then calls it."""
    with TestClient(APP):
        yield
    for suffix in ("", "-wal", "-shm"):
        Path(f"{_DB}{suffix}").unlink(missing_ok=True)


@schema.parametrize()
@settings(
    max_examples=EXAMPLES_PER_OPERATION,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
)
def test_every_operation_is_fuzz_clean(case: Any) -> None:
    case.call_and_validate(headers=AUTH, excluded_checks=EXCLUDED_CHECKS)


STATEFUL_SCENARIOS = 40
STATEFUL_STEPS = 20
"""Scenarios (call chains started from a root operation, then following the document's
links) and the most calls in one: about a minute on two cores."""

LINKED = sorted(
    {f"{link.method.upper()} {link.path}" for link in LINKS}
    | {f"{link.target[0].upper()} {link.target[1]}" for link in LINKS}
)
"""The operations the document's links join (searches, plans, exports, measurements, API
keys); the catalog's reads hold no state and are the stateless phase's."""
stateful_schema = schemathesis.openapi.from_asgi("/openapi.json", APP).include(name=LINKED)
"""A schema of its own, so that the hooks below leave the stateless phase's inputs alone."""

_TRAINING = st.fixed_dictionaries(
    {
        "model": st.fixed_dictionaries(
            {"preset": st.sampled_from(["llama3-8b", "llama2-7b", "mistral-7b"])}
        ),
        "cluster": st.fixed_dictionaries(
            {
                "node_groups": st.tuples(
                    st.fixed_dictionaries(
                        {
                            "accelerator": st.sampled_from(["h100-sxm", "a100-80gb"]),
                            "num_nodes": st.integers(1, 2),
                            "gpus_per_node": st.sampled_from([2, 4, 8]),
                        }
                    )
                ).map(list)
            }
        ),
        "workload": st.fixed_dictionaries(
            {
                "kind": st.just("training"),
                "global_batch_size": st.sampled_from([16, 64]),
                "sequence_length": st.sampled_from([1024, 2048]),
            }
        ),
        "top_k": st.integers(1, 3),
        "constraints": st.just({"time_limit_s": 1.0}),
    }
)
_SERVING = st.fixed_dictionaries(
    {
        "model": st.just({"preset": "llama3-8b"}),
        "cluster": st.just(
            {"node_groups": [{"accelerator": "h100-sxm", "num_nodes": 1, "gpus_per_node": 2}]}
        ),
        "workload": st.fixed_dictionaries(
            {
                "kind": st.just("serving"),
                "prompt_tokens": st.sampled_from([128, 512]),
                "output_tokens": st.sampled_from([32, 128]),
                "slo": st.just({"ttft_ms": 300, "tpot_ms": 30}),
                "num_requests": st.just(50),
            }
        ),
        "top_k": st.integers(1, 2),
        "constraints": st.just({"time_limit_s": 1.0}),
    }
)
SEARCH_BODIES = st.one_of(_TRAINING, _SERVING)
"""Small searches the service accepts (one or two nodes, a preset model): generated bodies
almost never pass the planner's rules, and a chain that starts with a 422 reaches no
search, plan or measurement. Their work is capped at 1 s (exhaustive on these sizes well
before that), and `?wait` is always `STATEFUL_WAIT_S`, so each has finished (201) with its
plans when its creation answers."""
MEASUREMENT_BODIES = st.fixed_dictionaries(
    {"step_time_s": st.floats(100.0, 10_000.0)},
    optional={"notes": st.text(max_size=20)},
)
"""Measured runs slow enough to be above every plan's compute floor."""


@stateful_schema.hook
def before_generate_body(context: Any, strategy: st.SearchStrategy) -> st.SearchStrategy:
    """Mostly accepted bodies for the operations that create what the links lead from,
    with the generated ones still among them."""
    label = context.operation.label if context.operation is not None else ""
    if label == "POST /v1/searches":
        return st.one_of(SEARCH_BODIES, SEARCH_BODIES, SEARCH_BODIES, strategy)
    if label == "POST /v1/plans/{plan_id}/measurements":
        return st.one_of(MEASUREMENT_BODIES, MEASUREMENT_BODIES, strategy)
    return strategy


@stateful_schema.hook
def before_generate_query(context: Any, strategy: st.SearchStrategy) -> st.SearchStrategy:
    """`POST /v1/searches` always with `?wait=STATEFUL_WAIT_S`: the answer must not depend on
    how fast the machine is (see `STATEFUL_WAIT_S`); the stateless phase covers generated
    `wait` values and `202`."""
    label = context.operation.label if context.operation is not None else ""
    if label == "POST /v1/searches":
        return st.just({"wait": STATEFUL_WAIT_S})
    return strategy


@stateful_schema.hook
def before_generate_headers(context: Any, strategy: st.SearchStrategy) -> st.SearchStrategy:
    """`POST /v1/searches` mostly without a generated `Idempotency-Key` (a random one is
    refused, or replays another body's search as a 409)."""
    label = context.operation.label if context.operation is not None else ""
    if label == "POST /v1/searches":
        return st.one_of(st.just({}), st.just({}), strategy)
    return strategy


class FuzzWorkflow(stateful_schema.as_state_machine()):  # type: ignore[misc]
    """The stateful phase: chains of calls along the document's links (app/api/links.py),
    every call with the admin key and every check but the two above."""

    def get_call_kwargs(self, case: Any) -> dict[str, Any]:
        return {"headers": AUTH}

    def validate_response(
        self, response: Any, case: Any, additional_checks: Any = None, **kwargs: Any
    ) -> None:
        case.validate_response(
            response,
            additional_checks=additional_checks,
            excluded_checks=EXCLUDED_CHECKS,
            headers=AUTH,
            transport_kwargs=kwargs or None,
            recorder=self.recorder,
        )


def test_linked_call_chains_are_fuzz_clean() -> None:
    FuzzWorkflow.run(
        settings=settings(
            max_examples=STATEFUL_SCENARIOS,
            stateful_step_count=STATEFUL_STEPS,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            derandomize=True,
            phases=[Phase.generate],
        )
    )


# ---- regressions found by the fuzzer ------------------------------------------------------
@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    with TestClient(APP, headers=AUTH) as test_client:
        yield test_client


HUGE = 9223372036854775808  # 2**63: beyond every 64-bit integer a database binds


@pytest.mark.parametrize(
    "path",
    [
        "/v1/searches?offset={n}",
        "/v1/searches/x/plans?offset={n}",
        "/v1/plans/x/measurements?offset={n}",
    ],
)
def test_offsets_beyond_the_maximum_are_422(client: TestClient, path: str) -> None:
    problem = assert_problem(client.get(path.format(n=HUGE)), 422)
    assert error_fields(problem) == ["offset"]
    assert client.get(path.format(n=10**9)).status_code in (200, 404)


def test_cursors_with_huge_ranks_or_bad_ids_are_422(client: TestClient) -> None:
    import base64
    import json

    def cursor(payload: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(payload).encode()).decode().rstrip("=")

    search = client.post(
        "/v1/searches?wait=1",
        json={
            "model": {"preset": "llama3-8b"},
            "cluster": {"node_groups": [{"accelerator": "h100-sxm", "num_nodes": 1}]},
            "workload": {"kind": "training", "global_batch_size": 64, "sequence_length": 2048},
            "top_k": 1,
        },
    ).json()
    bad_plan = cursor({"k": "p", "r": HUGE})
    problem = assert_problem(
        client.get(f"/v1/searches/{search['id']}/plans?cursor={bad_plan}"), 422
    )
    assert error_fields(problem) == ["cursor"]
    for payload in (
        {"k": "s", "t": "2026-01-01T00:00:00+00:00", "id": "\ud800"},
        {"k": "s", "t": "0001-01-01T00:00:00+05:00", "id": "a"},
        {"k": "s", "t": "2026-01-01T00:00:00", "id": 7},
    ):
        problem = assert_problem(client.get(f"/v1/searches?cursor={cursor(payload)}"), 422)
        assert error_fields(problem) == ["cursor"]


def test_a_lone_surrogate_in_a_body_is_a_422(client: TestClient) -> None:
    body = '{"model": {"preset": "llama3-8b\\ud800"}}'
    response = client.post(
        "/v1/models/resolve", content=body, headers={"content-type": "application/json"}
    )
    problem = assert_problem(response, 422)
    assert "surrogate" in problem["detail"]


def test_405_lists_every_method_of_the_path(client: TestClient) -> None:
    response = client.request("OPTIONS", "/v1/searches")
    assert_problem(response, 405)
    assert response.headers["allow"] == "GET, POST"


def test_every_operation_documents_its_problems() -> None:
    document = APP.openapi()
    assert "HTTPValidationError" not in document["components"]["schemas"]
    get_search = document["paths"]["/v1/searches/{search_id}"]["get"]["responses"]
    for status in ("404", "422", "500", "503"):
        assert "application/problem+json" in get_search[status]["content"], status
    assert "application/json" not in get_search["422"]["content"]
    post = document["paths"]["/v1/searches"]["post"]["responses"]
    assert {"400", "409", "413", "422", "429"} <= set(post)


def test_cancelling_keeps_the_search_readable_by_either_route(client: TestClient) -> None:
    """The stateful phase flagged `DELETE /v1/searches/{id}` (use-after-free: 200, and the
    search still readable). DELETE cancels by the HTTP contract (API.md) and stays; the
    links lead to `POST …/cancel`, the action that says what it does. Both cancel, neither
    removes the search, a finished search answers 409 to both."""
    body = {
        "model": {"preset": "llama3-8b"},
        "cluster": {"node_groups": [{"accelerator": "h100-sxm", "num_nodes": 1}]},
        "workload": {"kind": "training", "global_batch_size": 32, "sequence_length": 1024},
        "top_k": 1,
        "constraints": {"time_limit_s": 0.3},
    }
    for cancel in ("delete", "post"):
        search = client.post("/v1/searches?wait=1&dedupe=false", json=body).json()
        path = f"/v1/searches/{search['id']}"
        if cancel == "delete":
            answer = client.delete(path)
        else:
            answer = client.post(f"{path}/cancel")
        if answer.status_code == 200:  # still running when asked
            assert answer.json()["status"] == "cancelled"
        else:
            assert_problem(answer, 409)
            assert search["status"] in ("succeeded", "failed", "cancelled") or client.get(
                path
            ).json()["status"] in ("succeeded", "failed", "cancelled")
        assert client.get(path).json()["id"] == search["id"]
        again = client.delete(path) if cancel == "delete" else client.post(f"{path}/cancel")
        assert_problem(again, 409)  # finished now: nothing to cancel
    paths = APP.openapi()["paths"]
    assert set(paths["/v1/searches/{search_id}"]) == {"get", "delete"}
    assert set(paths["/v1/searches/{search_id}/cancel"]) == {"post"}
    links = paths["/v1/searches/{search_id}"]["get"]["responses"]["200"].get("links", {})
    assert all(
        link.get("operationId") != paths["/v1/searches/{search_id}"]["delete"]["operationId"]
        for link in links.values()
    )
