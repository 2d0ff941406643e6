"""meshplan's side of `bench/serving_vs_peers.py`: our serving estimate of one benchmark case
(a peers case of `bench/data/serving_peers.json` or a published row of
`bench/data/published_serving.json`), with each figure defined as the reference defines it.

- fixed batch (a static batch of B requests on a given layout, as AIConfigurator's
  `estimate` and llm-analysis price it): the prefill of one prompt, of the whole batch, the
  mean time per output token of the batch (decode steps at contexts p+1 … p+o−1), one decode
  step at the mean context, and output tokens/s of the static batch;
- SLO search: our serving search (max goodput per GPU) and AIConfigurator's recommended plan
  priced by our model (`evaluate_plan`), so the two plans compare under one cost model;
- published rows: offline maximum throughput (a saturated stream on the row's layout, or on
  the best tensor degree when the row does not say), a closed loop of c concurrent requests
  (the simulator's concurrency cap with every request ready at once), and static batches
  (prefill of the batch + o − 1 decode steps).
Rows whose prompt length the source does not give (MLPerf's OpenOrca subset) are skipped.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from cost_models.serving.analytical import build_instance_cost
from cost_models.serving.base import InstanceCost, IterationBatch
from cost_models.serving.engines import EngineInstanceCost, build_engine
from cost_models.serving.registry import build_serving_cost_model
from hardware_catalog.loader import resolve_cluster
from solver.serving.evaluate import InstanceCosts, ServingProblem, evaluate_plan, request_stream
from solver.serving.search import describe_plan, serving_search
from solver.serving.simulate import Request, simulate_colocated
from specs.cluster import ClusterSpec
from specs.errors import InfeasiblePlan
from specs.model import ModelSpec
from specs.presets import get_preset
from specs.serving import ServingPlan, ServingWorkload

SATURATED_REQUESTS = 600
"""Requests of an offline (all-at-once) simulation."""


def _cluster(accelerator: str, gpus: int) -> Any:
    per_node = gpus if gpus <= 8 else 8
    return resolve_cluster(
        ClusterSpec.model_validate(
            {
                "node_groups": [
                    {
                        "accelerator": accelerator,
                        "num_nodes": max(1, gpus // per_node),
                        "gpus_per_node": per_node,
                    }
                ]
            }
        )
    )


def _length(spec: Any) -> int | None:
    if isinstance(spec, int):
        return spec
    if isinstance(spec, dict) and spec.get("mean") is not None:
        return round(spec["mean"])
    return None


def _precision(case: Any) -> tuple[str, str]:
    weights = {"fp16": "fp16", "fp8": "fp8", "int4": "int4"}.get(case.precision, "bf16")
    kv = (case.raw.get("kv_cache_precision") if case.origin == "peers" else None) or (
        "fp8" if weights == "fp8" else "bf16"
    )
    return weights, kv


def _layout(case: Any) -> tuple[int, int]:
    """(tensor, expert) of our instance for a case's degrees: attention data parallelism
    with expert parallelism is our `expert` (attention replicas, experts over all GPUs)."""
    tensor = case.tensor or 1
    dp = case.attention_dp or 1
    return tensor, dp


def engine_of(case: Any) -> str | None:
    """The engine profile of a published row, read from its `engine` text (TensorRT-LLM and
    NIM → `tensorrt_llm`, vLLM → `vllm`, SGLang → `sglang`); None for an engine without a
    profile (LMDeploy's TurboMind) and for the peers' cases, which are the tools' own GPU-time
    estimates: those are priced on the GPU work alone."""
    if case.origin != "published":
        return None
    text = str(case.raw.get("engine", "")).lower()
    if "tensorrt" in text or "nim" in text:
        return "tensorrt_llm"
    if "sglang" in text:
        return "sglang"
    if "vllm" in text:
        return "vllm_v0" if "v0" in text else "vllm"
    return None


def _cost(model: ModelSpec, case: Any, tensor: int, expert: int) -> InstanceCost:
    weights, kv = _precision(case)
    cluster = _cluster(case.accelerator, case.num_gpus)
    cost = build_instance_cost(model, cluster, tensor, case.pipeline or 1, expert, weights, kv)  # type: ignore[arg-type]
    name = engine_of(case)
    if name is None:
        return cost
    engine = build_engine(name)
    return EngineInstanceCost(cost, engine.host(), engine.scheduler())


def _prefill_s(cost: InstanceCost, prompt: int, seqs: int = 1) -> float:
    return cost.iteration_time_s(
        IterationBatch(0, 0, seqs * prompt, seqs * prompt * (prompt + 1) / 2, seqs)
    )


def _step_s(cost: InstanceCost, batch: int, context: float) -> float:
    return cost.iteration_time_s(IterationBatch(batch, round(batch * context)))


def _mean_tpot_s(cost: InstanceCost, batch: int, prompt: int, output: int) -> float:
    """Mean decode step of a batch over contexts p+1 … p+o−1 (chord rule)."""
    if output <= 1:
        return 0.0
    return 0.5 * (_step_s(cost, batch, prompt + 1) + _step_s(cost, batch, prompt + output - 1))


def fixed_batch(case: Any) -> dict[str, Any]:
    model = get_preset(case.model)
    p, o = _length(case.prompt_tokens), _length(case.output_tokens)
    assert p is not None and o is not None
    tensor, expert = _layout(case)
    cost = _cost(model, case, tensor, expert)
    batch = (case.batch or 1) * expert
    tpot = _mean_tpot_s(cost, batch, p, o)
    whole = _prefill_s(cost, p, batch)
    return {
        "prefill_one_request_ms": _prefill_s(cost, p) * 1e3,
        "prefill_whole_batch_ms": whole * 1e3,
        "ttft_ms_reported": _prefill_s(cost, p) * 1e3,
        "tpot_ms": tpot * 1e3,
        "decode_step_ms": _step_s(cost, batch, p + o / 2) * 1e3,
        "throughput_tokens_per_s": batch * o / (whole + (o - 1) * tpot),
    }


def _peer_plan(case: Any) -> ServingPlan | None:
    """AIConfigurator's recommended plan (trtllm backend, the case's lengths) as ours."""
    for peer in case.raw.get("peers", []):
        rec = peer.get("recommended") or {}
        if (
            peer.get("tool") == "aiconfigurator"
            and "trtllm" in peer.get("variant", "")
            and peer.get("prompt_tokens", case.prompt_tokens) == case.prompt_tokens
            and rec.get("plan")
        ):
            plan = rec["plan"]
            instances = []
            for inst in plan["instances"]:
                dp = inst.get("attention_dp", 1)
                instances.append(
                    {
                        "role": inst["role"],
                        "count": inst["count"],
                        "parallelism": {
                            "tensor": inst["tensor"],
                            "pipeline": inst["pipeline"],
                            "expert": dp,
                        },
                        "max_batch_size": inst["max_batch_size"] * dp,
                        "chunk_size": None if inst["role"] == "prefill" else 8192,
                    }
                )
            return ServingPlan.model_validate({"mode": plan["mode"], "instances": instances})
    return None


def slo_search(case: Any) -> dict[str, Any]:
    model = get_preset(case.model)
    weights, kv = _precision(case)
    workload = ServingWorkload.model_validate(
        {
            "kind": "serving",
            "prompt_tokens": case.prompt_tokens,
            "output_tokens": case.output_tokens,
            "precision": weights,
            "kv_cache_precision": kv,
            "slo": {"ttft_ms": case.slo["ttft_ms"], "tpot_ms": case.slo["tpot_ms"]},
        }
    )
    problem = ServingProblem(model, _cluster(case.accelerator, case.num_gpus), workload)
    cost_model = build_serving_cost_model("analytical")
    started = time.perf_counter()
    result = serving_search(problem, cost_model, top_k=5)
    search_s = time.perf_counter() - started
    if not result.plans or result.plans[0].estimate.metrics is None:
        return {"search_s": search_s, "plan": "no plan", "why": "nothing meets the SLO"}
    best = result.plans[0].estimate
    m = best.metrics
    assert m is not None
    out_tokens = _length(case.output_tokens) or 1
    ours = {
        "tokens_per_s_per_gpu": m.goodput_rps * out_tokens / m.gpus_used,
        "ttft_ms": m.ttft_ms_p90,
        "tpot_ms": m.tpot_ms_p90,
        "request_rate_rps": m.goodput_rps,
        "search_s": search_s,
        "plan": describe_plan(best.plan),
    }
    theirs = _peer_plan(case)
    if theirs is not None:
        est = evaluate_plan(
            problem, theirs, InstanceCosts(problem, cost_model), request_stream(workload)
        )
        tm = est.metrics
        their_rate = 0.0 if tm is None else tm.goodput_rps * out_tokens / tm.gpus_used
        ours["peer_plan_under_our_model_tokens_per_s_per_gpu"] = their_rate
        ours["why"] = (
            f"AIConfigurator's plan ({describe_plan(theirs)}) priced by our model: "
            f"{their_rate:.0f} tok/s/GPU at the SLO; ours: "
            f"{ours['tokens_per_s_per_gpu']:.0f} tok/s/GPU "
            f"({'≥' if ours['tokens_per_s_per_gpu'] >= their_rate * (1 - 1e-9) else '<'} theirs)."
            f" Ours: {result.plans[0].explanation}"
        )
    return ours


def _saturated(
    cost: InstanceCost, replicas: int, prompt: int, output: int, n: int = SATURATED_REQUESTS
) -> float:
    reqs = [Request(0.0, prompt, output) for _ in range(n)]
    batch = max(1, min(2048, int(cost.kv_capacity_tokens // (prompt + output))))
    res = simulate_colocated(reqs, cost, replicas, batch, 8192)
    return res.throughput_tokens_per_s


def offline_max_throughput(case: Any) -> dict[str, Any] | None:
    model = get_preset(case.model)
    p, o = _length(case.prompt_tokens), _length(case.output_tokens)
    if p is None or o is None:
        return None
    groups = [case.tensor] if case.tensor else [t for t in (1, 2, 4, 8) if case.num_gpus % t == 0]
    best = 0.0
    for group in groups:
        # An MoE row that does not give its expert degree: its GPU group may run attention
        # as TP t × DP e with the experts over all t·e GPUs (TensorRT-LLM's attention DP,
        # vLLM/SGLang DP attention), so every split of the group is tried.
        splits = (
            [(group, 1)]
            if model.moe is None or case.expert
            else [(group // e, e) for e in (1, 2, 4, 8) if group % e == 0]
        )
        for t, e in splits:
            try:
                cost = _cost(model, case, t, e)
            except InfeasiblePlan:
                continue
            replicas = case.num_gpus // cost.num_gpus
            if replicas >= 1:
                best = max(best, _saturated(cost, replicas, p, o))
    return {
        "throughput_tokens_per_s": best,
        "throughput_tokens_per_s_per_gpu": best / case.num_gpus,
        "samples_per_s": best / o,
    }


def closed_loop(case: Any) -> dict[str, Any] | None:
    """A client with `concurrency` requests in flight (`--max-concurrency c`, every request
    ready at once): the simulator's concurrency cap, 8c requests (at least 200). The first c
    requests, sent together, are the benchmark's warm-up wave (GenAI-Perf / AIPerf warm-up
    requests): latencies are the means over the rest, once the clients have drifted apart."""
    model = get_preset(case.model)
    p, o = _length(case.prompt_tokens), _length(case.output_tokens)
    if p is None or o is None:
        return None
    tensor, expert = _layout(case)
    cost = _cost(model, case, tensor, expert)
    replicas = max(1, case.num_gpus // cost.num_gpus)
    c = case.concurrency or 1
    requests = [Request(0.0, p, o) for _ in range(max(200, 8 * c))]
    res = simulate_colocated(requests, cost, replicas, max(c, 1), 8192, concurrency=c)
    done = np.isfinite(res.e2e_s)
    done[:c] = False  # the warm-up wave
    tpot = float(res.tpot_s[done].mean())
    return {
        "ttft_ms": float(res.ttft_s[done].mean()) * 1e3,
        "itl_ms": tpot * 1e3,
        "tpot_ms_approx": tpot * 1e3,
        "decode_tokens_per_s_per_request_approx": 1.0 / tpot,
        "throughput_tokens_per_s": res.throughput_tokens_per_s,
    }


def static_batch(case: Any) -> dict[str, Any] | None:
    model = get_preset(case.model)
    p, o = _length(case.prompt_tokens), _length(case.output_tokens)
    if p is None or o is None:
        return None
    tensor, expert = _layout(case)
    cost = _cost(model, case, tensor, expert)
    b = case.batch or 1
    prefill = _prefill_s(cost, p, b)
    tpot = _mean_tpot_s(cost, b, p, o)
    e2e = prefill + (o - 1) * tpot
    return {
        "e2e_latency_ms_mean": e2e * 1e3,
        "e2e_latency_ms_p50": e2e * 1e3,
        "e2e_latency_ms_p99": e2e * 1e3,
        "ttft_ms_mean": prefill * 1e3,
        "token_latency_ms_p50": tpot * 1e3,
        "token_latency_ms_p99": tpot * 1e3,
        "throughput_tokens_per_s": b * o / e2e,
    }


def our_estimate(case: Any) -> dict[str, Any] | None:
    """Our figures for a case (keys as the case's reference defines them), or None."""
    if case.kind == "fixed_batch":
        return fixed_batch(case)
    if case.kind == "slo_search":
        return slo_search(case)
    if case.kind == "offline_max_throughput":
        return offline_max_throughput(case)
    if case.kind == "closed_loop_concurrency":
        return closed_loop(case)
    if case.kind == "static_batch":
        return static_batch(case)
    return None
