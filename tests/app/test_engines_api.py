"""Serving engines over HTTP: `GET /v1/engines`, plans that name their engine (estimates
and searches), engine comparisons, bad engine names and options as 422 problems naming the
field, and exports that launch the plan's engine or refuse it."""

from __future__ import annotations

import shlex
from typing import Any

import pytest
from app_support import assert_problem, error_fields

COLOCATED = {
    "mode": "colocated",
    "instances": [
        {
            "role": "both",
            "count": 2,
            "parallelism": {"tensor": 1, "pipeline": 1, "expert": 1},
            "max_batch_size": 64,
        }
    ],
}


@pytest.fixture
def serving() -> dict[str, Any]:
    """Llama-3-8B on one node of 2 H100s, 512/128 tokens, 100 simulated requests."""
    return {
        "model": {"preset": "llama3-8b"},
        "cluster": {
            "node_groups": [{"accelerator": "h100-sxm", "num_nodes": 1, "gpus_per_node": 2}]
        },
        "workload": {
            "kind": "serving",
            "prompt_tokens": 512,
            "output_tokens": 128,
            "slo": {"ttft_ms": 300, "tpot_ms": 30, "percentile": 90},
            "num_requests": 100,
            "arrival_rate_rps": 20,
        },
    }


def test_engines_are_listed_with_their_behaviour(client: Any) -> None:
    items = client.get("/v1/engines").json()["items"]
    by_name = {e["name"]: e for e in items}
    assert sorted(by_name) == ["sglang", "tensorrt_llm", "vllm", "vllm_v0"]
    assert [e["name"] for e in items if e["default"]] == ["vllm"]
    assert by_name["vllm"]["launcher"] == "vllm" and by_name["vllm_v0"]["launcher"] == "vllm"
    assert by_name["tensorrt_llm"]["launcher"] == "trtllm"
    assert by_name["sglang"]["prefill"] == "separate"
    assert by_name["vllm"]["kv_allocation"] == by_name["sglang"]["kv_allocation"] == "paged"
    assert by_name["tensorrt_llm"]["kv_allocation"] == "reserve"
    assert by_name["vllm_v0"]["host_per_sequence_us"] == pytest.approx(100.0)
    assert "num_scheduler_steps" in by_name["vllm_v0"]["options_schema"]["properties"]
    assert all(e["sources"] for e in items)
    # the route reads names as plans do (aliases, case)
    assert client.get("/v1/engines/TensorRT-LLM").json() == by_name["tensorrt_llm"]
    assert client.get("/v1/engines/sglang").json() == by_name["sglang"]
    assert client.get("/v1/engines/tgi").status_code == 404


def test_an_estimate_names_the_engine_it_was_priced_for(
    client: Any, serving: dict[str, Any]
) -> None:
    default = client.post("/v1/estimate", json={**serving, "plan": COLOCATED}).json()
    assert default["plan"]["engine"] == "vllm"
    v0 = client.post(
        "/v1/estimate",
        json={
            **serving,
            "plan": {
                **COLOCATED,
                "engine": "vLLM V0",
                "engine_options": {"num_scheduler_steps": 8},
            },
        },
    ).json()
    assert v0["plan"]["engine"] == "vllm_v0"
    # the plan echoes every setting it was priced with, the defaults included
    assert v0["plan"]["engine_options"] == {
        "num_scheduler_steps": 8,
        "async_output_processing": True,
        "enable_prefix_caching": False,
        "host_cost_scale": 1.0,
    }
    assert default["plan"]["engine_options"]["async_scheduling"] is True
    # a block of 8 decode steps holds new prompts back: TTFT rises at the same rate
    assert v0["metrics"]["ttft_ms_p50"] > default["metrics"]["ttft_ms_p50"]


@pytest.mark.parametrize(
    ("plan_update", "field"),
    [
        ({"engine": "tgi"}, "plan.engine"),
        ({"engine": "vllm_v0", "engine_options": {"num_scheduler_steps": 0}},
         "plan.engine_options.num_scheduler_steps"),
        ({"engine": "vllm", "engine_options": {"bogus": 1}}, "plan.engine_options.bogus"),
    ],
)  # fmt: skip
def test_bad_engines_are_422s_naming_the_field(
    client: Any, serving: dict[str, Any], plan_update: dict[str, Any], field: str
) -> None:
    response = client.post("/v1/estimate", json={**serving, "plan": {**COLOCATED, **plan_update}})
    problem = assert_problem(response, 422)
    assert field in error_fields(problem)


def test_a_search_compares_engines(client: Any, serving: dict[str, Any]) -> None:
    body = {
        **serving,
        "top_k": 50,
        "constraints": {"engines": ["vllm", "sglang"], "fixed": {"mode": "colocated"}},
    }
    search = client.post("/v1/searches?wait=30", json=body).json()
    assert search["status"] == "succeeded", search
    items = client.get(f"/v1/searches/{search['id']}/plans?limit=50").json()["items"]
    assert {p["engine"] for p in items} == {"vllm", "sglang"}
    per_gpu = [p["metrics"]["goodput_rps_per_gpu"] for p in items]
    assert per_gpu == sorted(per_gpu, reverse=True)
    bad = client.post("/v1/searches", json={**serving, "constraints": {"engines": ["vllm", "tgi"]}})
    assert "constraints.engines.1" in error_fields(assert_problem(bad, 422))


def test_a_training_search_refuses_engines(client: Any, tiny: dict[str, Any]) -> None:
    response = client.post("/v1/searches", json={**tiny, "constraints": {"engines": ["vllm"]}})
    assert "constraints.engines" in error_fields(assert_problem(response, 422))


def _search_plan(client: Any, serving: dict[str, Any], fixed: dict[str, Any]) -> str:
    body = {**serving, "top_k": 1, "constraints": {"fixed": {"mode": "colocated", **fixed}}}
    search = client.post("/v1/searches?wait=30", json=body).json()
    assert search["status"] == "succeeded", search
    plan_id: str = client.get(f"/v1/searches/{search['id']}/plans").json()["items"][0]["id"]
    return plan_id


def test_exports_launch_the_engine_the_plan_was_priced_for(
    client: Any, serving: dict[str, Any]
) -> None:
    sg = _search_plan(client, serving, {"engine": "sglang"})
    refused = assert_problem(client.get(f"/v1/plans/{sg}/export/vllm"), 422)
    assert "export it with sglang" in refused["detail"]
    assert client.get(f"/v1/plans/{sg}/export/sglang").status_code == 200
    slurm = client.get(f"/v1/plans/{sg}/export/slurm").json()  # wraps the plan's engine
    assert "sglang.launch_server" in " ".join(slurm["args"])
    trt = _search_plan(client, serving, {"engine": "tensorrt_llm"})
    exported = client.get(f"/v1/plans/{trt}/export/trtllm")
    assert exported.status_code == 200, exported.text
    body = exported.json()
    assert body["args"][0] == "trtllm-serve" and "--extra_llm_api_options" in body["args"]
    assert "enable_block_reuse: true" in body["content"]
    assert "enable_chunked_prefill: false" in body["content"]
    # the vLLM export refuses it, naming the export that launches it
    assert (
        "export it with trtllm"
        in assert_problem(client.get(f"/v1/plans/{trt}/export/vllm"), 422)["detail"]
    )


def test_a_vllm_v0_plan_exports_its_scheduler_settings(
    client: Any, serving: dict[str, Any]
) -> None:
    body = {
        **serving,
        "top_k": 1,
        "constraints": {"fixed": {"mode": "colocated", "engine": "vllm_v0"}},
    }
    search = client.post("/v1/searches?wait=30", json=body).json()
    plan = client.get(f"/v1/searches/{search['id']}/plans").json()["items"][0]
    exported = client.get(f"/v1/plans/{plan['id']}/export/vllm").json()
    assert exported["env"]["VLLM_USE_V1"] == "0"
    assert "export VLLM_USE_V1=0" in exported["content"]
    words = shlex.split(exported["content"], comments=True)
    assert "--num-scheduler-steps" not in words  # single-step by default
    assert "--disable-async-output-proc" not in words


def test_a_search_takes_engine_settings_and_its_plans_export_them(
    client: Any, serving: dict[str, Any]
) -> None:
    body = {
        **serving,
        "top_k": 1,
        "constraints": {
            "fixed": {"mode": "colocated", "engine": "vllm_v0"},
            "engine_options": {"vLLM V0": {"num_scheduler_steps": 8}},
        },
    }
    search = client.post("/v1/searches?wait=30", json=body).json()
    assert search["status"] == "succeeded", search
    plan = client.get(f"/v1/searches/{search['id']}/plans").json()["items"][0]
    assert plan["engine"] == "vllm_v0"
    assert plan["engine_options"]["num_scheduler_steps"] == 8
    exported = client.get(f"/v1/plans/{plan['id']}/export/vllm").json()
    args = exported["args"]
    assert args[args.index("--num-scheduler-steps") + 1] == "8"


@pytest.mark.parametrize(
    ("constraints", "field"),
    [
        ({"engine_options": {"sglang": {}}}, "constraints.engine_options.sglang"),
        (
            {
                "fixed": {"engine": "vllm_v0"},
                "engine_options": {"vllm_v0": {"num_scheduler_steps": 99}},
            },
            "constraints.engine_options.vllm_v0.num_scheduler_steps",
        ),
    ],
)
def test_bad_search_engine_settings_are_422s(
    client: Any, serving: dict[str, Any], constraints: dict[str, Any], field: str
) -> None:
    response = client.post("/v1/searches", json={**serving, "constraints": constraints})
    assert field in error_fields(assert_problem(response, 422))


def test_a_shared_prefix_is_cheaper_where_the_engine_caches_it(
    client: Any, serving: dict[str, Any]
) -> None:
    workload = {**serving["workload"], "prompt_tokens": 2048, "shared_prefix_tokens": 1536}
    body = {**serving, "workload": workload}

    def ttft(options: dict[str, Any]) -> float:
        plan = {**COLOCATED, "engine": "vllm", "engine_options": options}
        response = client.post("/v1/estimate", json={**body, "plan": plan})
        assert response.status_code == 200, response.text
        return float(response.json()["metrics"]["ttft_ms_p50"])

    # vLLM's prefix cache prefills 512 of the 2048 prompt tokens after the first request
    assert ttft({}) < 0.6 * ttft({"enable_prefix_caching": False})
    exported_flags = client.post("/v1/estimate", json={**body, "plan": COLOCATED}).json()
    assert exported_flags["plan"]["engine_options"]["enable_prefix_caching"] is True


def test_a_client_concurrency_cap_shapes_the_measured_latencies(
    client: Any, serving: dict[str, Any]
) -> None:
    closed = {k: v for k, v in serving["workload"].items() if k != "arrival_rate_rps"}

    def measure(workload: dict[str, Any]) -> dict[str, Any]:
        response = client.post(
            "/v1/estimate", json={**serving, "workload": workload, "plan": COLOCATED}
        )
        assert response.status_code == 200, response.text
        metrics: dict[str, Any] = response.json()["metrics"]
        return metrics

    one = measure({**closed, "max_concurrency": 1})
    many = measure({**closed, "max_concurrency": 64})
    # one client at a time: every request runs alone (batch 1); 64 clients share batches,
    # so each request waits longer per token and the system carries more
    assert one["max_concurrent_sequences"] == 1 and many["max_concurrent_sequences"] > 1
    assert many["tpot_ms_p50"] > one["tpot_ms_p50"]
    assert many["throughput_tokens_per_s"] > 5 * one["throughput_tokens_per_s"]
    assert_problem(
        client.post(
            "/v1/estimate",
            json={**serving, "workload": {**closed, "max_concurrency": 0}, "plan": COLOCATED},
        ),
        422,
    )


def test_the_goodput_bound_sees_the_cached_prefix_and_a_capped_rate_is_flagged(
    client: Any, serving: dict[str, Any]
) -> None:
    workload = {**serving["workload"], "prompt_tokens": 2048, "shared_prefix_tokens": 1500}
    plan = {**COLOCATED, "engine": "vllm"}

    def details(options: dict[str, Any]) -> dict[str, Any]:
        body = {**serving, "workload": workload, "plan": {**plan, "engine_options": options}}
        out: dict[str, Any] = client.post("/v1/estimate", json=body).json()
        return out

    cached, plain = details({}), details({"enable_prefix_caching": False})
    # the capacity bound prices prompts without the cached prefix (548 of 2048 tokens)
    assert (
        cached["details"]["capacity_upper_bound_rps"]
        > 1.3 * plain["details"]["capacity_upper_bound_rps"]
    )
    capped = client.post(
        "/v1/estimate",
        json={
            **serving,
            "workload": {**serving["workload"], "max_concurrency": 1},
            "plan": COLOCATED,
        },
    ).json()
    kinds = {v["kind"] for v in capped["violations"]}
    assert "capacity" in kinds and capped["feasible"] is False


@pytest.mark.parametrize(
    ("update", "field"),
    [
        ({"shared_prefix_tokens": True}, "workload.shared_prefix_tokens"),
        ({"max_concurrency": True}, "workload.max_concurrency"),
        ({"shared_prefix_tokens": 600}, "workload"),
    ],
)
def test_bad_serving_client_fields_are_422s(
    client: Any, serving: dict[str, Any], update: dict[str, Any], field: str
) -> None:
    body = {**serving, "workload": {**serving["workload"], **update}, "plan": COLOCATED}
    assert field in error_fields(assert_problem(client.post("/v1/estimate", json=body), 422))


def test_a_paging_engine_runs_more_requests_and_preempts_when_the_cache_is_short(
    client: Any,
) -> None:
    """Llama-3.1-70B on 2 A100-80GB (about 24k KV tokens) with 2000 + 1000-token requests:
    reserving both lengths runs 7 at a time (24k / 3k); vLLM admits on the prompt and
    preempts when the decodes outgrow the cache; TensorRT-LLM's no-evict scheduler never
    does."""

    def estimate(engine: str) -> dict[str, Any]:
        body = {
            "model": {"preset": "llama3.1-70b"},
            "cluster": {"node_groups": [{"accelerator": "a100-sxm-80gb", "num_nodes": 1,
                                         "gpus_per_node": 2}]},
            "workload": {"kind": "serving", "prompt_tokens": 2000, "output_tokens": 1000,
                         "arrival_rate_rps": 0.6, "slo": {"ttft_ms": 5000, "tpot_ms": 200}},
            "plan": {"mode": "colocated", "engine": engine, "instances": [
                {"role": "both", "count": 1, "parallelism": {"tensor": 2},
                 "max_batch_size": 64, "chunk_size": 2048}]},
        }  # fmt: skip
        response = client.post("/v1/estimate", json=body)
        assert response.status_code == 200, response.text
        return response.json()

    paged, reserve = estimate("vllm"), estimate("tensorrt_llm")
    kv = reserve["metrics"]["kv_capacity_tokens"]
    assert reserve["metrics"]["max_concurrent_sequences"] == kv // 3000
    assert reserve["metrics"]["preemptions"] == 0
    assert paged["metrics"]["max_concurrent_sequences"] > kv // 3000
    assert paged["metrics"]["preemptions"] > 0
    warnings = {w["code"]: w["detail"] for w in paged["warnings"]}
    assert f"preempted {paged['metrics']['preemptions']} of" in warnings["kv_preemption"]
    assert "kv_preemption" not in {w["code"] for w in reserve["warnings"]}
