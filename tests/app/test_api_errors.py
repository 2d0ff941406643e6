"""RFC 9457 problems: every error the API answers is application/problem+json with
type/title/status/detail/instance, and normal bad inputs never produce a 500."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from app_support import assert_problem, error_fields

from app.main import create_app
from tests.support import TestClient


def test_unknown_route_is_a_404_problem(client: Any) -> None:
    body = assert_problem(client.get("/v1/nothing-here"), 404, path="/v1/nothing-here")
    assert body["type"].endswith("/not-found")


def test_wrong_method_is_a_405_problem(client: Any) -> None:
    body = assert_problem(client.put("/v1/health"), 405, path="/v1/health")
    assert body["type"].endswith("/method-not-allowed")


def test_unknown_hardware_is_a_404_problem(client: Any) -> None:
    body = assert_problem(client.get("/v1/hardware/warp-9000"), 404, path="/v1/hardware/warp-9000")
    assert "warp-9000" in body["detail"]


def test_unknown_search_is_a_404_problem(client: Any) -> None:
    path = "/v1/searches/00000000-0000-0000-0000-000000000000"
    assert_problem(client.get(path), 404, path=path)
    assert_problem(client.get(path + "/plans"), 404, path=path + "/plans")
    assert_problem(client.post(path + "/cancel"), 404, path=path + "/cancel")
    assert_problem(client.get("/v1/plans/nope"), 404, path="/v1/plans/nope")


def test_malformed_json_is_a_422_problem(client: Any) -> None:
    response = client.post(
        "/v1/searches", content=b'{"model": ', headers={"content-type": "application/json"}
    )
    body = assert_problem(response, 422, path="/v1/searches")
    assert body["type"].endswith("/malformed-json")
    assert body["errors"][0]["rule"] == "json_invalid"


def test_wrong_types_name_the_field(client: Any, tiny: dict[str, Any]) -> None:
    tiny["workload"]["global_batch_size"] = "many"
    tiny["cluster"]["node_groups"][0]["num_nodes"] = [1]
    body = assert_problem(client.post("/v1/searches", json=tiny), 422, path="/v1/searches")
    fields = error_fields(body)
    assert "workload.global_batch_size" in fields
    assert "cluster.node_groups.0.num_nodes" in fields
    by_field = {e["field"]: e for e in body["errors"]}
    assert by_field["workload.global_batch_size"]["value"] == "many"
    assert by_field["workload.global_batch_size"]["rule"] == "int_parsing"


def test_negative_batch_is_a_422(client: Any, tiny: dict[str, Any]) -> None:
    tiny["workload"]["global_batch_size"] = -4
    body = assert_problem(client.post("/v1/searches", json=tiny), 422)
    error = next(e for e in body["errors"] if e["field"] == "workload.global_batch_size")
    assert error["value"] == -4
    assert error["rule"] == "greater_than_equal"


def test_missing_body_members_are_named(client: Any) -> None:
    body = assert_problem(client.post("/v1/searches", json={}), 422)
    assert {"model", "cluster", "workload"} <= set(error_fields(body))


def test_unknown_top_level_member_is_rejected(client: Any, tiny: dict[str, Any]) -> None:
    body = assert_problem(client.post("/v1/searches", json={**tiny, "colour": "red"}), 422)
    assert "colour" in error_fields(body)


def test_oversized_body_is_a_413_problem(settings_factory: Any, tiny: dict[str, Any]) -> None:
    app = create_app(settings_factory(max_request_bytes=4096))
    with TestClient(app) as client:
        big = {**tiny, "constraints": {"fixed": {}}, "padding": "x" * 5000}
        body = assert_problem(client.post("/v1/searches", json=big), 413, path="/v1/searches")
        assert body["max_bytes"] == 4096
        assert body["type"].endswith("/payload-too-large")


def test_oversized_streamed_body_without_length_is_a_413(
    settings_factory: Any, tiny: dict[str, Any]
) -> None:
    app = create_app(settings_factory(max_request_bytes=4096))
    payload = json.dumps({**tiny, "padding": "y" * 6000}).encode()

    def chunks() -> Iterator[bytes]:  # a generator body is sent chunked, without Content-Length
        for start in range(0, len(payload), 1000):
            yield payload[start : start + 1000]

    with TestClient(app) as client:
        response = client.post(
            "/v1/searches", content=chunks(), headers={"content-type": "application/json"}
        )
        assert "content-length" not in {k.lower() for k in response.request.headers}
        assert_problem(response, 413)


def test_body_under_the_limit_passes(settings_factory: Any) -> None:
    app = create_app(settings_factory(max_request_bytes=4096))
    with TestClient(app) as client:
        response = client.post("/v1/models/resolve", json={"model": {"preset": "llama3-8b"}})
        assert response.status_code == 200, response.text


def test_unhandled_error_is_a_generic_500_with_request_id(settings_factory: Any) -> None:
    app = create_app(settings_factory())

    @app.get("/v1/boom")
    def boom() -> None:
        raise RuntimeError("secret internal state")

    with TestClient(app, raise_server_exceptions=False) as client:
        response = client.get("/v1/boom", headers={"X-Request-ID": "req-42"})
        body = assert_problem(response, 500, path="/v1/boom")
        assert body["request_id"] == "req-42"
        assert response.headers["x-request-id"] == "req-42"
        assert "secret internal state" not in response.text


def test_every_response_carries_a_request_id(client: Any) -> None:
    first = client.get("/v1/health").headers["x-request-id"]
    second = client.get("/v1/health").headers["x-request-id"]
    assert first and second and first != second


def test_min_cost_without_prices_is_a_422_naming_each_group(
    client: Any, tiny: dict[str, Any]
) -> None:
    body = {
        "model": {"preset": "llama3-8b"},
        "cluster": {
            "node_groups": [
                {"accelerator": "h100-sxm", "num_nodes": 1, "price_per_gpu_hour": 4.0},
                {"accelerator": "a100-80gb", "num_nodes": 1},
            ]
        },
        "workload": {"kind": "serving", "prompt_tokens": 512, "output_tokens": 128,
                     "slo": {"ttft_ms": 1000}, "objective": "min_cost",
                     "arrival_rate_rps": 10},
    }  # fmt: skip
    problem = assert_problem(client.post("/v1/searches", json=body), 422, path="/v1/searches")
    assert error_fields(problem) == ["cluster.node_groups.1.price_per_gpu_hour"]
    assert client.get("/v1/searches").json()["items"] == []  # nothing stored


def test_precision_the_accelerator_lacks_is_a_422(client: Any, tiny: dict[str, Any]) -> None:
    body = {
        **tiny,
        "cluster": {"node_groups": [{"accelerator": "v100-32gb", "num_nodes": 1}]},
        "workload": {**tiny["workload"], "precision": "fp8"},
    }
    problem = assert_problem(
        client.post("/v1/estimate", json={**body, "plan": {"parallelism": {"data": 8}}}),
        422,
        path="/v1/estimate",
    )
    assert error_fields(problem) == ["workload.precision"]
    assert problem["errors"][0]["value"] == "fp8"


def test_moe_routing_must_match_the_model(client: Any) -> None:
    body = {
        "model": {"preset": "mixtral-8x7b"},
        "cluster": {"node_groups": [{"accelerator": "h100-sxm", "num_nodes": 2}]},
        "workload": {
            "kind": "training",
            "global_batch_size": 64,
            "sequence_length": 4096,
            "moe_routing": {"expert_loads": [1, 2, 3], "optimize_placement": True},
        },
    }
    problem = assert_problem(client.post("/v1/searches", json=body), 422)
    assert error_fields(problem) == ["workload.moe_routing.expert_loads"]
    assert "8 routed experts" in problem["detail"]
    dense = {
        **body,
        "model": {"preset": "llama3-8b"},
        "workload": {**body["workload"], "moe_routing": {"imbalance": 1.0}},
    }
    problem = assert_problem(client.post("/v1/searches", json=dense), 422)
    assert error_fields(problem) == ["workload.moe_routing"]
    assert client.get("/v1/searches").json()["items"] == []
