"""POST /v1/estimate with a context-parallel algorithm (issue 15): each algorithm's rules
are 422 problems naming the plan field, the rule and the value; legal plans price, and
their exposed context-parallel time is the algorithm's."""

from __future__ import annotations

from typing import Any

import pytest
from app_support import assert_problem, error_fields


def _plan(context: int, algorithm: str, heads: int = 1, tensor: int = 1) -> dict[str, Any]:
    return {
        "parallelism": {"context": context, "tensor": tensor, "data": 4 // (context * tensor)},
        "context_parallel_algorithm": algorithm,
        "context_parallel_heads": heads,
    }


@pytest.mark.parametrize(
    ("algorithm", "heads"), [("ring", 1), ("ulysses", 1), ("all_gather", 1), ("hybrid", 2)]
)
def test_every_algorithm_prices(client: Any, tiny: dict[str, Any], algorithm, heads) -> None:
    body = {**tiny, "plan": _plan(4, algorithm, heads)}
    response = client.post("/v1/estimate", json=body)
    assert response.status_code == 200, response.text
    result = response.json()
    assert result["plan"]["context_parallel_algorithm"] == algorithm
    assert result["plan"]["context_parallel_heads"] == heads
    assert result["metrics"]["time_breakdown_s"]["context_parallel_comm"] > 0.0


def test_ulysses_needs_kv_heads_divisible_by_the_context_degree(
    client: Any, tiny: dict[str, Any]
) -> None:
    tiny["model"]["num_kv_heads"] = 2  # 2 KV heads cannot split over 4 ranks
    problem = assert_problem(
        client.post("/v1/estimate", json={**tiny, "plan": _plan(4, "ulysses")}), 422
    )
    (error,) = [e for e in problem["errors"] if e["field"] == "plan.context_parallel_algorithm"]
    assert error["rule"] == "divisibility" and error["value"] == "ulysses"
    assert "num_kv_heads / tensor = 2 / 1 = 2" in error["message"]


def test_ulysses_needs_query_heads_of_a_tensor_rank_divisible(
    client: Any, tiny: dict[str, Any]
) -> None:
    tiny["model"].update({"num_attention_heads": 6, "num_kv_heads": 6, "hidden_size": 192})
    problem = assert_problem(
        client.post("/v1/estimate", json={**tiny, "plan": _plan(4, "ulysses")}), 422
    )
    messages = [e["message"] for e in problem["errors"]]
    assert any("num_attention_heads / tensor = 6 / 1 = 6" in m for m in messages), messages


def test_hybrid_head_degree_must_divide_the_context_degree(
    client: Any, tiny: dict[str, Any]
) -> None:
    problem = assert_problem(
        client.post("/v1/estimate", json={**tiny, "plan": _plan(4, "hybrid", heads=3)}), 422
    )
    assert "plan.context_parallel_heads" in error_fields(problem)
    # the ends are the pure algorithms, not a hybrid
    problem = assert_problem(
        client.post("/v1/estimate", json={**tiny, "plan": _plan(4, "hybrid", heads=4)}), 422
    )
    assert "plan.context_parallel_heads" in error_fields(problem)


def test_head_degree_only_with_the_hybrid(client: Any, tiny: dict[str, Any]) -> None:
    problem = assert_problem(
        client.post("/v1/estimate", json={**tiny, "plan": _plan(4, "ring", heads=2)}), 422
    )
    assert "plan.context_parallel_heads" in error_fields(problem)


def test_an_algorithm_needs_context_parallelism(client: Any, tiny: dict[str, Any]) -> None:
    plan = {"parallelism": {"data": 4}, "context_parallel_algorithm": "all_gather"}
    problem = assert_problem(client.post("/v1/estimate", json={**tiny, "plan": plan}), 422)
    assert "plan.context_parallel_algorithm" in error_fields(problem)


def test_unknown_algorithm_is_a_422(client: Any, tiny: dict[str, Any]) -> None:
    plan = {"parallelism": {"context": 4}, "context_parallel_algorithm": "striped"}
    problem = assert_problem(client.post("/v1/estimate", json={**tiny, "plan": plan}), 422)
    assert "plan.context_parallel_algorithm" in error_fields(problem)


def test_every_algorithm_needs_load_balanced_chunks(client: Any, tiny: dict[str, Any]) -> None:
    tiny["workload"]["sequence_length"] = 500  # not a multiple of 2 × 4
    for algorithm in ("ring", "ulysses", "all_gather"):
        problem = assert_problem(
            client.post("/v1/estimate", json={**tiny, "plan": _plan(4, algorithm)}), 422
        )
        fields = {(e["field"], e["rule"]) for e in problem["errors"]}
        assert ("plan.parallelism.context", "divisibility") in fields


def test_a_framework_that_does_not_run_the_algorithm_says_so(
    client: Any, tiny: dict[str, Any]
) -> None:
    # framework rules are an answer (200, infeasible), as for the other framework rules
    plan = {**_plan(4, "ulysses"), "framework": "torchtitan", "zero_stage": 2}
    response = client.post("/v1/estimate", json={**tiny, "plan": plan})
    assert response.status_code == 200, response.text
    result = response.json()
    assert result["feasible"] is False
    (violation,) = result["violations"]
    assert violation["field"] == "plan.framework"
    assert violation["detail"] == (
        "torchtitan does not run context_parallel_algorithm ulysses (it runs: ring, all_gather)"
    )
    plan["context_parallel_algorithm"] = "all_gather"
    result = client.post("/v1/estimate", json={**tiny, "plan": plan}).json()
    assert result["feasible"] is True, result["violations"]
