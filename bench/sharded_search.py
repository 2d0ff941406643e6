"""Sharded search on a local Ray against one process: wall time and equality of the top-k.

    python bench/sharded_search.py [--cpus 2] [--shards 2] [--repeat 2]

Each problem is searched once in this process (`solver.search`, cold caches each time) and
then split into shards over a local Ray (`ray.init(num_cpus=N)`) as the `ray` executor does
(`app.services.executors._sharded`), once with the shards sharing their bound (the
executor's way) and once without; a warm-up run first lets the Ray workers import the
project, so the figures compare searches, not interpreter start-up. Prints the best wall
times, the speed-ups, the candidates evaluated over all shards (the work, which does not
depend on the machine's load) and whether the plans are identical (they must be).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.core.config import Settings  # noqa: E402
from app.schemas import SearchCreate  # noqa: E402
from app.services import executors, planning  # noqa: E402

PROBLEMS = {
    "llama3-70b on 8x8 H100, top 100": {
        "model": {"preset": "llama3-70b"},
        "cluster": {"node_groups": [{"accelerator": "h100-sxm", "num_nodes": 8}]},
        "workload": {"kind": "training", "global_batch_size": 1024, "sequence_length": 4096},
        "top_k": 100,
    },
    "llama3-405b on 128x8 H100, top 100, micro-batches 1-8": {
        "model": {"preset": "llama3-405b"},
        "cluster": {"node_groups": [{"accelerator": "h100-sxm", "num_nodes": 128}]},
        "workload": {"kind": "training", "global_batch_size": 2048, "sequence_length": 8192},
        "constraints": {"micro_batch_sizes": [1, 2, 4, 8], "max_virtual_pipeline": 8},
        "top_k": 100,
    },
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpus", type=int, default=2)
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    import ray

    import solver
    from solver.search.branch_and_bound import clear_caches

    executors.init_ray(None, num_cpus=args.cpus)
    try:
        for name, body in PROBLEMS.items():
            stored = planning.prepare_search(SearchCreate.model_validate(body), Settings()).problem
            top_k = int(stored.get("top_k", 10))
            singles: list[float] = []
            shardeds: list[float] = []
            unshared: list[float] = []
            evaluated: dict[bool, int] = {}
            same = True
            for run in range(args.repeat + 1):
                training, cost_model, constraints = planning.training_inputs(stored)
                clear_caches()
                started = time.perf_counter()
                one = solver.search(training, cost_model, constraints, top_k=top_k)
                single = time.perf_counter() - started
                for share, times in ((True, shardeds), (False, unshared)):
                    training, cost_model, constraints = planning.training_inputs(stored)
                    started = time.perf_counter()
                    split = executors._sharded(
                        training,
                        cost_model,
                        constraints,
                        top_k=top_k,
                        progress=lambda *_: None,
                        should_stop=lambda: False,
                        stored=stored,
                        shards=args.shards,
                        shard_min_candidates=1,
                        share_bound=share,
                    )
                    if run:  # run 0 warms the Ray workers up
                        times.append(time.perf_counter() - started)
                    evaluated[share] = split.stats.evaluated
                    same = same and [p.estimate.plan for p in one.plans] == [
                        p.estimate.plan for p in split.plans
                    ]
                if run:
                    singles.append(single)
            best_single, best_sharded, best_unshared = min(singles), min(shardeds), min(unshared)
            print(
                f"{name}: {one.stats.enumerated} candidates, {one.stats.evaluated} evaluated; "
                f"one process {best_single:.2f} s; {args.shards} shards on {args.cpus} Ray CPUs "
                f"sharing the bound {best_sharded:.2f} s (x{best_single / best_sharded:.2f}, "
                f"{evaluated[True]} evaluated), not sharing {best_unshared:.2f} s "
                f"(x{best_single / best_unshared:.2f}, {evaluated[False]} evaluated); "
                f"identical top-{top_k}: {same}"
            )
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
