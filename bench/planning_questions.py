"""The planning questions of issue 16 asked through the HTTP API, in process (a TestClient
over `create_app` on a temporary SQLite file): the cheapest plan against the fastest, the
Pareto front of a search, how many nodes a deadline needs, a re-plan after a lost node, the
other objectives (training on one kind of node and on a mixed cluster, serving `min_gpus`)
and a serving re-plan.
Prints each answer's figures; not a test (tests/app/test_api_{objectives,pareto,capacity,
replan}.py check them).

    .venv/bin/python -m bench.planning_questions
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from app.core.config import Settings
from app.main import create_app
from tests.support import TestClient

FIGURES = (
    "tokens_per_s",
    "gpus_used",
    "cost_per_million_tokens",
    "energy_per_token_j",
    "peak_memory_gib",
    "time_to_train_days",
    "restart_s",
    "restart_peer_bytes",
    "restart_reload_bytes",
    "break_even_s",
)
WORKLOAD = {
    "kind": "training",
    "global_batch_size": 256,
    "sequence_length": 4096,
    "train_tokens": 1e12,
}


def _figures(metrics: dict[str, Any]) -> str:
    shown = []
    for name in FIGURES:
        value = metrics.get(name)
        if value is not None:
            shown.append(f"{name}={value:.4g}" if isinstance(value, float) else f"{name}={value}")
    return " ".join(shown)


def _search(client: Any, body: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    search = client.post("/v1/searches?wait=60&dedupe=false", json=body).json()
    plans = client.get(f"/v1/searches/{search['id']}/plans").json()["items"]
    return search, plans


def _degrees(plan: dict[str, Any]) -> str:
    p = plan["parallelism"]
    return f"d{p['data']} t{p['tensor']} p{p['pipeline']} c{p['context']}"


SERVING = {
    "kind": "serving",
    "prompt_tokens": 1024,
    "output_tokens": 256,
    "slo": {"ttft_ms": 1000, "tpot_ms": 50, "percentile": 90},
}


def _serving_figures(metrics: dict[str, Any]) -> str:
    names = (
        "goodput_rps",
        "gpus_used",
        "price_per_hour",
        "restart_instances",
        "restart_reload_bytes",
        "restart_s",
        "restart_goodput_rps",
        "restart_lost_requests",
    )
    return " ".join(
        f"{n}={metrics[n]:.4g}" if isinstance(metrics[n], float) else f"{n}={metrics[n]}"
        for n in names
        if metrics.get(n) is not None
    )


def _instances(plan: dict[str, Any]) -> str:
    parts = []
    for i in plan["instances"]:
        degrees = " ".join(f"{k}{v}" for k, v in sorted(i["parallelism"].items()) if v != 1)
        parts.append(f"{i['count']}x{i['role']}[{degrees or 'one GPU'}]")
    return " + ".join(parts)


def _serving_questions(client: Any) -> None:
    """Serving `min_gpus` at a rate (issue 16's Llama-3.1-8B at 20 req/s on 8 L40S) and a
    serving plan re-planned after a lost node."""
    print("== serving min_gpus: Llama-3.1-8B at 20 req/s on 8 L40S")
    body = {
        "model": {"preset": "llama3.1-8b"},
        "cluster": {"node_groups": [{"accelerator": "l40s", "num_nodes": 1, "gpus_per_node": 8}]},
        "workload": {**SERVING, "objective": "min_gpus", "arrival_rate_rps": 20},
        "top_k": 3,
    }
    started = time.perf_counter()
    _, plans = _search(client, body)
    print(f"({time.perf_counter() - started:.1f} s)")
    for plan in plans:
        print(f"  {plan['rank']}. {_instances(plan)}  {_serving_figures(plan['metrics'])}")
    print("== serving re-plan: Llama-3.1-8B on 2 x 8 H100 loses a node")
    body = {
        "model": {"preset": "llama3.1-8b"},
        "cluster": {"node_groups": [{"accelerator": "h100-sxm", "num_nodes": 2}]},
        "workload": SERVING,
        "constraints": {"fixed": {"mode": "colocated", "tensor": 1, "pipeline": 1}},
        "top_k": 3,
    }
    _, plans = _search(client, body)
    print(f"  before: {_instances(plans[0])}  {_serving_figures(plans[0]['metrics'])}")
    started = time.perf_counter()
    replanned = client.post(
        f"/v1/plans/{plans[0]['id']}/replan?wait=60", json={"lost_nodes": 1}
    ).json()
    print(f"({time.perf_counter() - started:.1f} s)")
    for plan in client.get(f"/v1/searches/{replanned['id']}/plans").json()["items"][:3]:
        keep = " (keep)" if plan["metrics"].get("replan_keep") else ""
        print(f"  {plan['rank']}. {_instances(plan)}{keep}  {_serving_figures(plan['metrics'])}")


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(
            database_url=f"sqlite:///{Path(tmp) / 'questions.db'}",
            search_executor="thread",
            max_search_time_limit_s=120,
        )
        with TestClient(create_app(settings)) as client:
            cluster = {"node_groups": [{"accelerator": "h100-sxm", "num_nodes": 4}]}
            base = {"model": {"preset": "llama3-8b"}, "cluster": cluster, "workload": WORKLOAD}
            print("== objectives: Llama-3-8B, 256 x 4096 tokens per step, 4 x 8 H100")
            fastest = None
            for objective in ("max_throughput", "min_cost", "min_energy"):
                started = time.perf_counter()
                _, plans = _search(client, {**base, "objective": objective, "top_k": 3})
                print(f"{objective} ({time.perf_counter() - started:.1f} s)")
                for plan in plans:
                    print(f"  {plan['rank']}. {_degrees(plan)}  {_figures(plan['metrics'])}")
                fastest = fastest or plans[0]
            for objective, extra in (
                ("min_time_to_train", {}),
                ("min_gpus", {"target_tokens_per_s": 150_000}),
            ):
                started = time.perf_counter()
                body = {**base, "workload": {**WORKLOAD, **extra}, "objective": objective}
                _, plans = _search(client, {**body, "top_k": 3})
                print(f"{objective} {extra} ({time.perf_counter() - started:.1f} s)")
                for plan in plans:
                    print(f"  {plan['rank']}. {_degrees(plan)}  {_figures(plan['metrics'])}")
            print("== min_cost on a mixed cluster: 2 x 8 H100 and 2 x 8 A100 80GB at $1.50")
            mixed = {
                "node_groups": [
                    {"accelerator": "h100-sxm", "num_nodes": 2},
                    {"accelerator": "a100-80gb", "num_nodes": 2, "price_per_gpu_hour": 1.5},
                ]
            }
            _, plans = _search(client, {**base, "cluster": mixed, "objective": "min_cost"})
            for plan in plans[:3]:
                pools = sorted(set(plan["stage_groups"] or []))
                print(f"  {plan['rank']}. {_degrees(plan)} on {pools}  {_figures(plan['metrics'])}")
            _serving_questions(client)
            print("== Pareto front: the same model on one node of 8 H100")
            one = {
                **base,
                "cluster": {"node_groups": [{"accelerator": "h100-sxm", "num_nodes": 1}]},
            }
            search, _ = _search(client, {**one, "top_k": 3})
            started = time.perf_counter()
            front = client.get(f"/v1/searches/{search['id']}/pareto").json()
            print(
                f"{len(front['plans'])} plans, complete={front['complete']}, "
                f"{time.perf_counter() - started:.1f} s, pruned {front['stats']['pruned']}"
            )
            for item in front["plans"][:5]:
                print(f"  {_degrees(item['plan'])}  {_figures(item['metrics'])}")
            print("== capacity: 1T tokens in 30 days, up to 8 nodes of H100 or A100 40GB")
            started = time.perf_counter()
            answer = client.post(
                "/v1/capacity",
                json={
                    "model": {"preset": "llama3-8b"},
                    "node_types": [
                        {"accelerator": "h100-sxm", "num_nodes": 8},
                        {"accelerator": "a100-40gb", "num_nodes": 8},
                    ],
                    "workload": {**WORKLOAD, "global_batch_size": 512, "deadline_days": 30},
                    "constraints": {"time_limit_s": 120},
                },
            ).json()
            print(
                f"target {answer['target_tokens_per_s']:,.0f} tokens/s "
                f"({time.perf_counter() - started:.1f} s)"
            )
            for node_type in answer["node_types"]:
                speeds = [
                    (s["num_nodes"], round(s["metrics"]["tokens_per_s"]) if s["metrics"] else None)
                    for s in node_type["sizes"]
                ]
                print(
                    f"  {node_type['node_group']['accelerator']}: smallest meeting "
                    f"{node_type['smallest_meeting']}; nodes, tokens/s: {speeds}"
                )
            rec = answer["recommendation"]
            if rec is not None:
                size = rec["size"]
                print(
                    f"  recommended: node type {rec['index']}, {size['num_nodes']} nodes, "
                    f"run cost {size['run_cost']:,.0f}; {_figures(size['metrics'])}"
                )
            print("== re-plan: the fastest 4-node plan loses one node")
            assert fastest is not None
            started = time.perf_counter()
            replanned = client.post(
                f"/v1/plans/{fastest['id']}/replan?wait=60", json={"lost_nodes": 1}
            ).json()
            keep = replanned["stats"]["replan"]["keep"]
            print(f"({time.perf_counter() - started:.1f} s) keeping the old degrees:")
            if keep is not None:
                print(f"  {_degrees(keep['plan'])}  {_figures(keep)}")
            plans = client.get(f"/v1/searches/{replanned['id']}/plans").json()["items"]
            for plan in plans[:3]:
                print(f"  {plan['rank']}. {_degrees(plan)}  {_figures(plan['metrics'])}")


if __name__ == "__main__":
    main()
