"""Serving search latency: wall time of `solver.serving.search.serving_search` (in-process,
cold caches) on the issue's cases, with the best plan and the search statistics. Prints a
table; not a test. Targets (issue 5): Llama-3.1-70B on 8 H100 under TTFT ≤ 1000 ms /
TPOT ≤ 50 ms in under 5 s; any serving search on 64 GPUs in under 10 s (2 cores).

    .venv/bin/python bench/serving_search_latency.py [--repeat 3] [--http URL]

With `--http`, the same requests go to a running server (`POST /v1/searches?wait=120`) and
the end-to-end time is printed too.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from cost_models.serving.registry import build_serving_cost_model
from hardware_catalog.loader import resolve_cluster
from solver.serving.evaluate import ServingProblem
from solver.serving.search import describe_plan, serving_search
from specs.cluster import ClusterSpec
from specs.presets import get_preset
from specs.serving import ServingWorkload

SLO = {"ttft_ms": 1000, "tpot_ms": 50, "percentile": 90}
CASES: list[dict[str, Any]] = [
    {
        "name": "llama3.1-70b / 8 x h100 (1024/256)",
        "model": "llama3.1-70b",
        "accelerator": "h100-sxm",
        "nodes": 1,
        "workload": {"prompt_tokens": 1024, "output_tokens": 256, "slo": SLO},
    },
    {
        "name": "llama3.1-70b / 64 x h100 (1024/256)",
        "model": "llama3.1-70b",
        "accelerator": "h100-sxm",
        "nodes": 8,
        "workload": {"prompt_tokens": 1024, "output_tokens": 256, "slo": SLO},
    },
    {
        "name": "llama3.1-8b / 64 x h100 (lognormal 2000/300, fp8 option)",
        "model": "llama3.1-8b",
        "accelerator": "h100-sxm",
        "nodes": 8,
        "workload": {
            "prompt_tokens": {"mean": 2000, "p50": 1500},
            "output_tokens": {"mean": 300, "p50": 200},
            "precision_options": ["fp8"],
            "slo": {"ttft_ms": 500, "tpot_ms": 30, "percentile": 90},
        },
    },
    {
        "name": "qwen3-235b-a22b / 8 x h200 (1024/256)",
        "model": "qwen3-235b-a22b",
        "accelerator": "h200",
        "nodes": 1,
        "workload": {"prompt_tokens": 1024, "output_tokens": 256, "slo": SLO},
    },
    {
        "name": "llama3.1-70b / 64 x h100 min_latency at 40 req/s",
        "model": "llama3.1-70b",
        "accelerator": "h100-sxm",
        "nodes": 8,
        "workload": {
            "prompt_tokens": 1024,
            "output_tokens": 256,
            "slo": SLO,
            "objective": "min_latency",
            "arrival_rate_rps": 40,
        },
    },
    {
        "name": "qwen3-235b-a22b / 64 x h100 min_gpus at 40 req/s",
        "model": "qwen3-235b-a22b",
        "accelerator": "h100-sxm",
        "nodes": 8,
        "workload": {
            "prompt_tokens": 1024,
            "output_tokens": 256,
            "slo": SLO,
            "objective": "min_gpus",
            "arrival_rate_rps": 40,
        },
    },
]


def _body(case: dict[str, Any]) -> dict[str, Any]:
    return {
        "model": {"preset": case["model"]},
        "cluster": {
            "node_groups": [
                {"accelerator": case["accelerator"], "num_nodes": case["nodes"], "gpus_per_node": 8}
            ]
        },
        "workload": {"kind": "serving", **case["workload"]},
        "top_k": 5,
    }


def run_local(case: dict[str, Any]) -> tuple[float, str, dict[str, Any]]:
    body = _body(case)
    cluster = resolve_cluster(ClusterSpec.model_validate(body["cluster"]))
    problem = ServingProblem(
        get_preset(case["model"]), cluster, ServingWorkload.model_validate(body["workload"])
    )
    started = time.perf_counter()
    result = serving_search(problem, build_serving_cost_model("analytical"), top_k=5)
    wall = time.perf_counter() - started
    if not result.plans or result.plans[0].estimate.metrics is None:
        return wall, "no plan", result.stats.to_dict()
    est = result.plans[0].estimate
    m = est.metrics
    assert m is not None
    best = (
        f"{describe_plan(est.plan)}; goodput {m.goodput_rps:.3g} req/s "
        f"({m.goodput_rps_per_gpu:.3g}/GPU) on {m.gpus_used} GPUs"
    )
    return wall, best, result.stats.to_dict()


def run_http(url: str, case: dict[str, Any]) -> float:
    import httpx

    started = time.perf_counter()
    with httpx.Client(base_url=url, timeout=180) as client:
        r = client.post("/v1/searches", params={"wait": 120}, json=_body(case))
        r.raise_for_status()
        client.get(f"/v1/searches/{r.json()['id']}/plans").raise_for_status()
    return time.perf_counter() - started


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--http", default=None, help="base URL of a running meshplan server")
    args = ap.parse_args()
    for case in CASES:
        walls = []
        best, stats = "", {}
        for _ in range(args.repeat):
            wall, best, stats = run_local(case)
            walls.append(wall)
        line = (
            f"{case['name']:58s} median {statistics.median(walls):6.2f} s "
            f"(min {min(walls):.2f}); enumerated {stats.get('enumerated')}, evaluated "
            f"{stats.get('evaluated')}, simulations {stats.get('solver_calls')}, pruned "
            f"{stats.get('pruned')}, {stats.get('status')}"
        )
        print(line)
        print(f"    best: {best}")
        if args.http:
            print(f"    HTTP end to end: {run_http(args.http, case):.2f} s")


if __name__ == "__main__":
    main()
