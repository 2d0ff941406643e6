"""Bad inputs are answered with 4xx problems, never a 500 (a 500 is a bug)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from app_support import PROBLEM_JSON
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support import TINY_CLUSTER, TINY_MODEL, TINY_WORKLOAD

GOOD_PLAN = {"parallelism": {"data": 4}}

BAD_BODIES: list[tuple[str, Any]] = [
    ("/v1/searches", None),
    ("/v1/searches", []),
    ("/v1/searches", "text"),
    ("/v1/searches", {"model": None, "cluster": TINY_CLUSTER, "workload": TINY_WORKLOAD}),
    ("/v1/searches", {"model": [], "cluster": TINY_CLUSTER, "workload": TINY_WORKLOAD}),
    ("/v1/searches", {"model": {"preset": 7}, "cluster": TINY_CLUSTER, "workload": TINY_WORKLOAD}),
    (
        "/v1/searches",
        {
            "model": {"preset": "llama3-8b", "num_layers": 2},
            "cluster": TINY_CLUSTER,
            "workload": TINY_WORKLOAD,
        },
    ),
    (
        "/v1/searches",
        {
            "model": {"hf_config": {"model_type": "llama"}},
            "cluster": TINY_CLUSTER,
            "workload": TINY_WORKLOAD,
        },
    ),
    (
        "/v1/searches",
        {
            "model": {"hf_config": {"model_type": "bert", "hidden_size": 8}},
            "cluster": TINY_CLUSTER,
            "workload": TINY_WORKLOAD,
        },
    ),
    (
        "/v1/searches",
        {"model": {"hf_config": "config.json"}, "cluster": TINY_CLUSTER, "workload": TINY_WORKLOAD},
    ),
    (
        "/v1/searches",
        {"model": TINY_MODEL, "cluster": {"node_groups": []}, "workload": TINY_WORKLOAD},
    ),
    (
        "/v1/searches",
        {
            "model": TINY_MODEL,
            "cluster": {"node_groups": [{"accelerator": ""}]},
            "workload": TINY_WORKLOAD,
        },
    ),
    (
        "/v1/searches",
        {
            "model": TINY_MODEL,
            "cluster": TINY_CLUSTER,
            "workload": {"kind": "serving", "prompt_tokens": 10},
        },
    ),
    (
        "/v1/searches",
        {
            "model": TINY_MODEL,
            "cluster": TINY_CLUSTER,
            "workload": {**TINY_WORKLOAD, "precision": "int3"},
        },
    ),
    (
        "/v1/searches",
        {
            "model": TINY_MODEL,
            "cluster": TINY_CLUSTER,
            "workload": TINY_WORKLOAD,
            "constraints": {"fixed": {"stage_layers": [1, 1]}},
        },
    ),
    (
        "/v1/searches",
        {
            "model": TINY_MODEL,
            "cluster": TINY_CLUSTER,
            "workload": TINY_WORKLOAD,
            "constraints": {"fixed": {"tensor": True}},
        },
    ),
    (
        "/v1/searches",
        {
            "model": TINY_MODEL,
            "cluster": TINY_CLUSTER,
            "workload": TINY_WORKLOAD,
            "constraints": {"memory_headroom_gib": -1},
        },
    ),
    (
        "/v1/searches",
        {"model": TINY_MODEL, "cluster": TINY_CLUSTER, "workload": TINY_WORKLOAD, "top_k": 2.5},
    ),
    (
        "/v1/searches",
        {
            "model": TINY_MODEL,
            "cluster": TINY_CLUSTER,
            "workload": TINY_WORKLOAD,
            "cost_model": {"name": "analytical", "config": []},
        },
    ),
    ("/v1/estimate", {"model": TINY_MODEL, "cluster": TINY_CLUSTER, "workload": TINY_WORKLOAD}),
    (
        "/v1/estimate",
        {
            "model": TINY_MODEL,
            "cluster": TINY_CLUSTER,
            "workload": TINY_WORKLOAD,
            "plan": {"parallelism": {"data": 0}},
        },
    ),
    (
        "/v1/estimate",
        {
            "model": TINY_MODEL,
            "cluster": TINY_CLUSTER,
            "workload": TINY_WORKLOAD,
            "plan": {"parallelism": {"data": 2, "tensor": 2}, "stage_layers": [4, 4]},
        },
    ),
    (
        "/v1/estimate",
        {
            "model": TINY_MODEL,
            "cluster": TINY_CLUSTER,
            "workload": TINY_WORKLOAD,
            "plan": {
                "parallelism": {"data": 1, "tensor": 4, "sequence_parallel": True},
                "micro_batch_size": 3,
            },
        },
    ),
    (
        "/v1/estimate",
        {
            "model": TINY_MODEL,
            "cluster": TINY_CLUSTER,
            "workload": TINY_WORKLOAD,
            "plan": {"parallelism": {"data": 1, "tensor": 1, "pipeline": 4, "expert": 2}},
        },
    ),
    ("/v1/models/resolve", {"model": "llama3-8b"}),
    ("/v1/models/resolve", {"model": {}}),
    ("/v1/models/resolve", {"model": {**TINY_MODEL, "hidden_size": 250}}),
]


@pytest.mark.parametrize(("path", "body"), BAD_BODIES)
def test_bad_bodies_are_4xx_problems(client: Any, path: str, body: Any) -> None:
    response = client.post(path, json=body)
    assert 400 <= response.status_code < 500, (response.status_code, response.text)
    assert response.headers["content-type"].startswith(PROBLEM_JSON)


def test_non_finite_numbers_are_rejected(client: Any) -> None:
    raw = json.dumps(
        {
            "model": TINY_MODEL,
            "cluster": TINY_CLUSTER,
            "workload": TINY_WORKLOAD,
            "plan": GOOD_PLAN,
            "constraints": {"memory_headroom_gib": float("nan")},
        }
    )
    response = client.post(
        "/v1/estimate", content=raw, headers={"content-type": "application/json"}
    )
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith(PROBLEM_JSON)


_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**40), 2**40)
    | st.text(max_size=8)
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3)
    ),
    max_leaves=8,
)
_MODEL_KEYS = st.sampled_from(sorted(TINY_MODEL) + ["moe", "head_dim", "preset", "hf_config"])


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(key=_MODEL_KEYS, value=_JSON)
def test_fuzzed_model_fields_never_500(client: Any, key: str, value: Any) -> None:
    model = {**TINY_MODEL, key: value}
    response = client.post(
        "/v1/estimate",
        json={
            "model": model,
            "cluster": TINY_CLUSTER,
            "workload": TINY_WORKLOAD,
            "plan": GOOD_PLAN,
        },
    )
    assert response.status_code < 500, response.text


_PLAN_KEYS = st.sampled_from(
    [
        "data",
        "tensor",
        "pipeline",
        "virtual_pipeline",
        "context",
        "expert",
        "expert_tensor",
        "sequence_parallel",
    ]
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    degrees=st.dictionaries(_PLAN_KEYS, st.integers(1, 8) | st.booleans(), max_size=4),
    mbs=st.integers(1, 8),
    zero=st.integers(0, 3),
    recompute=st.sampled_from(["none", "selective", "full"]),
)
def test_fuzzed_plans_never_500(
    client: Any, degrees: dict[str, Any], mbs: int, zero: int, recompute: str
) -> None:
    plan = {
        "parallelism": degrees,
        "micro_batch_size": mbs,
        "zero_stage": zero,
        "recompute": recompute,
    }
    response = client.post(
        "/v1/estimate",
        json={
            "model": TINY_MODEL,
            "cluster": TINY_CLUSTER,
            "workload": TINY_WORKLOAD,
            "plan": plan,
        },
    )
    assert response.status_code in (200, 422), response.text
