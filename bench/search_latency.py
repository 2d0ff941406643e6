"""Search latency benchmark: wall time, candidates and pruning for the reference cases.

Targets (issue 2, on 2 cores): Llama-3-70B on 64 H100 < 0.3 s, GPT-3 175B on 1024 A100 < 1 s,
Llama-3-405B on 16,384 H100 < 3 s. Each case runs `--repeat` times with cold caches (solver
caches cleared, a fresh cost model) and the median is printed.

`--http URL` also measures the round trip a client sees against a running service
(`make serve`): `POST /v1/searches?wait=30&dedupe=false` until the finished search is
answered, then `GET .../plans?limit=10`. `dedupe=false` makes every repeat a new search
(without it the service answers a repeated request from the search it stored the first
time, and the repeats would time a lookup).

MoE cases (issue 4; target well under 10 s) run in a separate section (`MOE_CASES`, once
each, `--no-moe` skips them) until they meet it: DeepSeek-V3 on 2048 H800 (its 3 dense + 58
MoE layers go through the partition ILP) and Qwen3-235B-A22B on 256 H100, every expert /
expert-tensor degree searched (Megatron-Core folding).

Mixed clusters (issue 12; targets on 2 cores: two GPU types × 512 GPUs ≤ 3 s, three types
and 1,536 GPUs ≤ 10 s) run in their own section (`MIXED_CASES`, `--no-mixed` skips them):
each pool alone plus every ordering of pools along the pipeline (`solver.search.mixed`).

Usage: `python bench/search_latency.py [--repeat 3] [--only-mixed] [--http http://127.0.0.1:8000]`.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cost_models.base import TrainingProblem  # noqa: E402
from cost_models.registry import build_cost_model  # noqa: E402
from hardware_catalog import resolve_cluster  # noqa: E402
from solver import search  # noqa: E402
from solver.search.branch_and_bound import clear_caches  # noqa: E402
from specs import ClusterSpec, SearchConstraints, TrainingWorkload  # noqa: E402
from specs.presets import get_preset  # noqa: E402

CASES = [
    # (label, preset, accelerator, nodes, gpus/node, global batch, seq, target s)
    ("Llama-3-70B on 64 H100", "llama3-70b", "h100-sxm", 8, 8, 1024, 4096, 0.3),
    ("GPT-3 175B on 1024 A100", "gpt3-175b", "a100-80gb", 128, 8, 1536, 2048, 1.0),
    ("Llama-3-405B on 16384 H100", "llama3-405b", "h100-sxm", 2048, 8, 2048, 8192, 3.0),
]


MOE_CASES = [
    # DeepSeek-V3 report (arXiv 2412.19437 §3.1, §4.2): 2048 H800, 4096-token sequences,
    # batch 15360; Qwen3-235B-A22B on 32 × 8 H100 at 4M tokens per step.
    ("DeepSeek-V3 on 2048 H800", "deepseek-v3", "h800", 256, 8, 15360, 4096, 10.0),
    ("Qwen3-235B-A22B on 256 H100", "qwen3-235b-a22b", "h100-sxm", 32, 8, 1024, 4096, 10.0),
]


PER_STAGE = {"per_stage_tensor": True}
MIXED_CASES = [
    # (label, preset, [(accelerator, nodes of 8)], global batch, seq, target s, constraints)
    ("Llama-3-70B, 512 H100 + 512 A100", "llama3-70b",
     [("h100-sxm", 64), ("a100-80gb", 64)], 1024, 4096, 3.0, {}),
    ("Llama-3-405B, 512 H100 + 512 A100", "llama3-405b",
     [("h100-sxm", 64), ("a100-80gb", 64)], 2048, 8192, 3.0, {}),
    ("Llama-3-70B, 512 each H100/A100/H200", "llama3-70b",
     [("h100-sxm", 64), ("a100-80gb", 64), ("h200", 64)], 1024, 4096, 10.0, {}),
    # a tensor degree per group (HexiScale): wider search, same targets
    ("70B, 512 H100 + 512 L40S, tp/group", "llama3-70b",
     [("h100-sxm", 64), ("l40s", 64)], 1024, 4096, 3.0, PER_STAGE),
    ("70B, 512 H100 + 512 A100, tp/group", "llama3-70b",
     [("h100-sxm", 64), ("a100-80gb", 64)], 1024, 4096, 3.0, PER_STAGE),
    ("70B, 512 H100/A100/H200, tp/group", "llama3-70b",
     [("h100-sxm", 64), ("a100-80gb", 64), ("h200", 64)], 1024, 4096, 10.0, PER_STAGE),
]  # fmt: skip


def run_case(preset: str, accel: str, nodes: int, gpn: int, gbs: int, seq: int):  # type: ignore[no-untyped-def]
    problem = TrainingProblem(
        model=get_preset(preset),
        cluster=resolve_cluster(
            ClusterSpec.model_validate(
                {"node_groups": [{"accelerator": accel, "num_nodes": nodes, "gpus_per_node": gpn}]}
            )
        ),
        workload=TrainingWorkload(global_batch_size=gbs, sequence_length=seq),
    )
    t0 = time.perf_counter()
    result = search(problem, build_cost_model("analytical"), SearchConstraints(), top_k=10)
    return time.perf_counter() - t0, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--http", metavar="URL", help="also time the HTTP round trip")
    parser.add_argument("--no-moe", action="store_true", help="skip the MoE section")
    parser.add_argument("--no-mixed", action="store_true", help="skip the mixed-cluster section")
    parser.add_argument(
        "--only-mixed", action="store_true", help="run the mixed-cluster section alone"
    )
    args = parser.parse_args()
    if args.only_mixed:
        mixed_section(args.repeat)
        return
    print(
        f"{'case':32} {'median s':>9} {'target':>7} {'ok':>3} {'enumerated':>10} {'evaluated':>9} "
        f"{'splits':>6} {'best step s':>11} {'MFU':>5}  pruned"
    )
    for label, preset, accel, nodes, gpn, gbs, seq, target in CASES:
        times = []
        result = None
        for _ in range(args.repeat):
            clear_caches()
            elapsed, result = run_case(preset, accel, nodes, gpn, gbs, seq)
            times.append(elapsed)
        assert result is not None
        st = result.stats
        best = result.plans[0].estimate.metrics if result.plans else None
        med = statistics.median(times)
        print(
            f"{label:32} {med:9.3f} {target:7.1f} {'yes' if med < target else 'NO':>3} "
            f"{st.enumerated:10d} {st.evaluated:9d} {st.solver_calls:6d} "
            f"{best.step_time_s if best else float('nan'):11.2f} {best.mfu if best else float('nan'):5.2f}  "
            f"{dict(sorted(st.pruned.items()))}"
        )

    if not args.no_moe:
        moe_section()
    if not args.no_mixed:
        mixed_section(args.repeat)
    if args.http:
        http_round_trips(args.http, args.repeat)


def moe_section() -> None:
    """Each MoE case once (cold caches): wall time, status and the top plan's layout."""
    print("\nMoE (every expert / expert-tensor degree; once each, cold caches):")
    for label, preset, accel, nodes, gpn, gbs, seq, target in MOE_CASES:
        clear_caches()
        elapsed, result = run_case(preset, accel, nodes, gpn, gbs, seq)
        st = result.stats
        print(
            f"{label:32} {elapsed:9.3f} {target:7.1f} {'yes' if elapsed < target else 'NO':>3} "
            f"{st.enumerated:10d} {st.evaluated:9d} {st.solver_calls:6d}  status {st.status}"
        )
        if result.plans:
            est = result.plans[0].estimate
            par, met = est.plan.parallelism, est.metrics
            ep = est.details.get("expert_parallel", {})
            print(
                f"    best: dp{par.data} tp{par.tensor} pp{par.pipeline} vp{par.virtual_pipeline} "
                f"cp{par.context} ep{par.expert} etp{par.expert_tensor} "
                f"mbs{est.plan.micro_batch_size} z{est.plan.zero_stage} {est.plan.recompute}: "
                f"step {met.step_time_s:.2f} s, MFU {met.mfu:.3f}, all-to-all "
                f"{met.time_breakdown_s.expert_parallel_comm:.2f} s/step "
                f"({ep.get('all_to_all_tier')}, {ep.get('all_to_all_s_per_layer', 0) * 1e3:.2f} "
                f"ms per layer and micro-batch)"
            )


def mixed_section(repeat: int) -> None:
    """Each mixed case `repeat` times (cold caches): median wall time and the top plan."""
    from solver import mixed_search

    print("\nMixed clusters (each pool alone + pipelines across pools; cold caches):")
    for label, preset, groups, gbs, seq, target, constraints in MIXED_CASES:
        problem = TrainingProblem(
            model=get_preset(preset),
            cluster=resolve_cluster(
                ClusterSpec.model_validate(
                    {
                        "node_groups": [
                            {"accelerator": a, "num_nodes": n, "gpus_per_node": 8}
                            for a, n in groups
                        ]
                    }
                )
            ),
            workload=TrainingWorkload(global_batch_size=gbs, sequence_length=seq),
        )
        times = []
        result = None
        for _ in range(repeat):
            clear_caches()
            t0 = time.perf_counter()
            result = mixed_search(
                problem,
                build_cost_model("analytical"),
                SearchConstraints.model_validate(constraints),
                top_k=10,
            )
            times.append(time.perf_counter() - t0)
        assert result is not None
        med = statistics.median(times)
        st = result.stats
        print(
            f"{label:38} {med:7.3f} {target:7.1f} {'yes' if med < target else 'NO':>3} "
            f"{st.enumerated:8d} {st.evaluated:6d}  status {st.status}"
        )
        if result.plans:
            est = result.plans[0].estimate
            par = est.plan.parallelism
            shares = est.plan.data_shares or []
            used = sorted(set(est.plan.stage_groups or [])) or [
                f"{x.group}×{x.replicas}({x.sequences} seq)" for x in shares
            ]
            degrees = f" (stage tensor {est.plan.stage_tensor})" if est.plan.stage_tensor else ""
            print(
                f"    best: dp{par.data} tp{par.tensor}{degrees} pp{par.pipeline} mbs"
                f"{est.plan.micro_batch_size} {est.plan.recompute} on {'+'.join(used)}: step "
                f"{est.metrics.step_time_s:.2f} s, MFU {est.metrics.mfu:.3f}, layers "
                f"{est.plan.stage_layers}"
            )


def http_round_trips(url: str, repeat: int) -> None:
    """POST each case with ?wait and read its ten plans; print the median round trip."""
    import httpx

    print(f"\nHTTP round trip against {url} (POST ?wait=30&dedupe=false + GET plans?limit=10):")
    with httpx.Client(base_url=url, timeout=120) as client:
        for label, preset, accel, nodes, gpn, gbs, seq, _ in CASES:
            body = {
                "model": {"preset": preset},
                "cluster": {
                    "node_groups": [
                        {"accelerator": accel, "num_nodes": nodes, "gpus_per_node": gpn}
                    ]
                },
                "workload": {"kind": "training", "global_batch_size": gbs, "sequence_length": seq},
            }
            times = []
            ids = set()
            for _ in range(repeat):
                t0 = time.perf_counter()
                created = client.post(
                    "/v1/searches", params={"wait": 30, "dedupe": "false"}, json=body
                )
                created.raise_for_status()
                plans = client.get(created.json()["plans_url"], params={"limit": 10})
                plans.raise_for_status()
                times.append(time.perf_counter() - t0)
                ids.add(created.json()["id"])
            print(
                f"{label:32} {statistics.median(times):9.3f} s  "
                f"status {created.status_code}, {len(plans.json()['items'])} plans, "
                f"{len(ids)} distinct searches of {repeat}"
            )


if __name__ == "__main__":
    main()
