"""Contract tests of the read-only catalog endpoints (API.md field names)."""

from __future__ import annotations

from typing import Any

from app_support import assert_problem, error_fields

from app import __version__


def test_health(client: Any) -> None:
    response = client.get("/v1/health")
    assert response.status_code == 200
    body = response.json()
    pool = body.pop("pool")
    assert body == {"status": "ok", "version": __version__, "database": "sqlite"}
    assert pool["kind"] == "thread" and pool["state"] == "ok" and pool["restarts"] == 0


def test_hardware_list_has_the_contract_fields(client: Any) -> None:
    items = client.get("/v1/hardware").json()["items"]
    assert len(items) >= 5
    ids = [a["id"] for a in items]
    assert "h100-sxm" in ids and len(ids) == len(set(ids))
    for accelerator in items:
        for member in (
            "id",
            "name",
            "vendor",
            "memory_gib",
            "memory_bandwidth_gb_s",
            "peak_tflops",
            "scale_up_bandwidth_gb_s",
            "scale_out_bandwidth_gb_s",
            "sources",
        ):
            assert member in accelerator, (accelerator["id"], member)
        assert accelerator["sources"], accelerator["id"]


def test_hardware_by_id(client: Any) -> None:
    h100 = client.get("/v1/hardware/h100-sxm").json()
    # NVIDIA H100 SXM5 datasheet: 989.4 dense BF16 TFLOP/s (1979 with sparsity), 3.35 TB/s
    assert h100["peak_tflops"]["bf16"] == 989.4
    assert h100["memory_bandwidth_gb_s"] == 3350.0
    # NVLink 4: 18 links × 25 GB/s = 450 GB/s per direction
    assert h100["scale_up_bandwidth_gb_s"] == 450.0


def test_model_presets_list_and_read(client: Any) -> None:
    items = client.get("/v1/model-presets").json()["items"]
    by_name = {p["name"]: p for p in items}
    assert "llama3-70b" in by_name and "mixtral-8x7b" in by_name
    assert all("num_parameters" in p for p in items)
    llama = client.get("/v1/model-presets/llama3-70b").json()
    # Meta Llama 3 70B: 70.55e9 parameters (Hugging Face model card)
    assert abs(llama["num_parameters"] - 70.55e9) / 70.55e9 < 0.005
    assert llama["num_layers"] == 80 and llama["hidden_size"] == 8192
    mixtral = client.get("/v1/model-presets/mixtral-8x7b").json()
    # Mixtral of Experts (arXiv 2401.04088): 46.7B total, 12.9B active parameters
    assert abs(mixtral["num_parameters"] - 46.7e9) / 46.7e9 < 0.01
    assert abs(mixtral["num_active_parameters"] - 12.9e9) / 12.9e9 < 0.01


def test_unknown_preset_is_a_404_problem(client: Any) -> None:
    assert_problem(
        client.get("/v1/model-presets/llama9-1t"), 404, path="/v1/model-presets/llama9-1t"
    )


def test_models_resolve_explicit_spec_counts_parameters(client: Any) -> None:
    spec = {
        "name": "small",
        "num_layers": 2,
        "hidden_size": 64,
        "num_attention_heads": 4,
        "num_kv_heads": 2,
        "ffn_hidden_size": 128,
        "vocab_size": 100,
        "gated_mlp": True,
        "tie_embeddings": False,
    }
    body = client.post("/v1/models/resolve", json={"model": spec}).json()
    # per layer: attention h·a·d + 2·h·g·d + a·d·h = 64·64 + 2·64·32 + 64·64 = 12288,
    # gated MLP 3·64·128 = 24576, two RMSNorms 128 → 36992; ×2 layers = 73984;
    # embedding 100·64 = 6400, LM head 6400, final norm 64 → 86848
    assert body["num_parameters"] == 86848
    assert body["name"] == "small"


def test_models_resolve_preset(client: Any) -> None:
    body = client.post("/v1/models/resolve", json={"model": {"preset": "llama3-8b"}}).json()
    # Meta Llama 3 8B: 8.03e9 parameters
    assert abs(body["num_parameters"] - 8.03e9) / 8.03e9 < 0.005


def test_models_resolve_unknown_preset_names_the_field(client: Any) -> None:
    response = client.post("/v1/models/resolve", json={"model": {"preset": "gpt-17"}})
    body = assert_problem(response, 422, path="/v1/models/resolve")
    assert "model.preset" in error_fields(body)


def test_models_resolve_kv_heads_must_divide_heads(client: Any) -> None:
    spec = {
        "num_layers": 2,
        "hidden_size": 64,
        "num_attention_heads": 6,
        "num_kv_heads": 4,
        "ffn_hidden_size": 128,
        "vocab_size": 100,
    }
    body = assert_problem(client.post("/v1/models/resolve", json={"model": spec}), 422)
    assert any(f.startswith("model") for f in error_fields(body))
    assert "divisible" in body["detail"]


def test_cost_models_list(client: Any) -> None:
    items = client.get("/v1/cost-models").json()["items"]
    assert "analytical" in [c["name"] for c in items]


def test_openapi_and_docs(client: Any) -> None:
    spec = client.get("/openapi.json").json()
    paths = spec["paths"]
    for path in (
        "/v1/health",
        "/v1/hardware",
        "/v1/hardware/{accelerator_id}",
        "/v1/model-presets",
        "/v1/model-presets/{name}",
        "/v1/models/resolve",
        "/v1/estimate",
        "/v1/searches",
        "/v1/searches/{search_id}",
        "/v1/searches/{search_id}/plans",
        "/v1/plans/{plan_id}",
        "/v1/cost-models",
    ):
        assert path in paths, path
    assert paths["/v1/searches"]["post"]["summary"].startswith("Start a plan search")
    assert "post" in paths["/v1/searches/{search_id}/cancel"]
    assert client.get("/docs").status_code == 200


# ---- systems and fabrics -------------------------------------------------------------------


def test_systems_list_and_read(client: Any) -> None:
    items = client.get("/v1/systems").json()["items"]
    ids = [s["id"] for s in items]
    assert "dgx-h100" in ids and "gb200-nvl72" in ids and ids == sorted(ids)
    for system in items:
        for member in (
            "accelerator",
            "gpus_per_node",
            "scale_up_domain_gpus",
            "scale_up_fabric",
            "scale_out_fabric",
            "scale_up_bandwidth_gb_s",
            "scale_out_bandwidth_gb_s",
            "fabric",
            "sources",
        ):
            assert member in system, (system["id"], member)
    gb200 = client.get("/v1/systems/gb200-nvl72").json()
    # GB200 NVL72: 18 compute trays of 4 GPUs, one 72-GPU NVLink domain
    assert (gb200["gpus_per_node"], gb200["scale_up_domain_gpus"]) == (4, 72)
    assert client.get("/v1/systems/HGX%20H100").json()["id"] == "dgx-h100"
    assert client.get("/v1/systems/dgx-h100").json()["fabric"] == {
        "topology": "rail_optimized",
        "oversubscription": 1.0,
        "nodes_per_leaf": 32,
    }


def test_fabrics_list_and_read(client: Any) -> None:
    items = client.get("/v1/fabrics").json()["items"]
    ids = [f["id"] for f in items]
    assert "nvlink4-nvswitch" in ids and "infiniband-ndr" in ids
    for fabric in items:
        assert set(fabric["collectives"]) == {
            "all_reduce",
            "all_gather",
            "reduce_scatter",
            "all_to_all",
            "send_recv",
        }
        assert fabric["sources"], fabric["id"]
    nvlink4 = client.get("/v1/fabrics/nvlink4-nvswitch").json()
    assert nvlink4["line_rate_gb_s"] == 450.0 and nvlink4["kind"] == "scale_up"
    nvls = nvlink4["in_network_reduction"]
    # 8x H200 NVLS all-reduce: 482.26 GB/s busbw at 16 GiB on a 450 GB/s link
    assert nvls["name"] == "nvls" and nvls["min_ranks"] == 5
    assert nvls["all_reduce"][-1] == [16 * 1024**3, round(482.26 / 450, 4)]
    assert client.get("/v1/fabrics/IB%20NDR").json()["id"] == "infiniband-ndr"


def test_unknown_system_and_fabric_are_404_problems(client: Any) -> None:
    body = assert_problem(client.get("/v1/systems/dgx-h10"), 404, path="/v1/systems/dgx-h10")
    assert "dgx-h100" in body["detail"]
    assert body["suggestions"][0] == "dgx-h100"
    assert_problem(client.get("/v1/fabrics/nvlink9"), 404, path="/v1/fabrics/nvlink9")


def test_openapi_lists_the_topology_endpoints_and_fields(client: Any) -> None:
    spec = client.get("/openapi.json").json()
    for path in (
        "/v1/systems",
        "/v1/systems/{system_id}",
        "/v1/fabrics",
        "/v1/fabrics/{fabric_id}",
    ):
        assert path in spec["paths"], path
    schemas = spec["components"]["schemas"]
    node_group = schemas["NodeGroupSpec"]["properties"]
    for field in ("system", "scale_up_domain_gpus"):
        assert node_group[field]["description"], field
    assert "fabric" in schemas["ClusterSpec"]["properties"]
    layout = schemas["FabricLayoutSpec"]["properties"]
    assert all(layout[f]["description"] for f in ("topology", "oversubscription", "nodes_per_leaf"))


def test_domain_that_does_not_fit_the_node_is_a_422_naming_the_field(
    client: Any, tiny: dict[str, Any]
) -> None:
    group = tiny["cluster"]["node_groups"][0]
    group.update({"gpus_per_node": 8, "scale_up_domain_gpus": 12})
    body = {**tiny, "plan": {"parallelism": {"data": 4}}}
    problem = assert_problem(client.post("/v1/estimate", json=body), 422)
    assert "cluster.node_groups.0.scale_up_domain_gpus" in error_fields(problem)
    assert "multiple of gpus_per_node (8)" in problem["detail"]


def test_system_that_does_not_hold_the_accelerator_is_a_422(
    client: Any, tiny: dict[str, Any]
) -> None:
    tiny["cluster"]["node_groups"][0]["system"] = "dgx-b200"
    body = {**tiny, "plan": {"parallelism": {"data": 4}}}
    problem = assert_problem(client.post("/v1/estimate", json=body), 422)
    assert "cluster.node_groups.0.system" in error_fields(problem)
    assert "'b200'" in problem["detail"]


def test_unknown_system_in_a_request_is_a_422(client: Any, tiny: dict[str, Any]) -> None:
    del tiny["cluster"]["node_groups"][0]["accelerator"]
    tiny["cluster"]["node_groups"][0]["system"] = "dgx-h10"
    body = {**tiny, "plan": {"parallelism": {"data": 4}}}
    problem = assert_problem(client.post("/v1/estimate", json=body), 422)
    assert "cluster.node_groups.0.system" in error_fields(problem)
