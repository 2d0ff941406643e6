"""The planning questions of issue 16 asked through the HTTP API, in process (a TestClient
over `create_app` on a temporary SQLite file): the cheapest plan against the fastest, the
Pareto front of a search, how many nodes a deadline needs, and a re-plan after a lost node.
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
