"""Outside check on a mixed cluster: AMP's measured trials against meshplan's prices and AMP's.

`bench/data/published_mixed_runs.json` holds the trials AMP ran on 3 V100 nodes (AWS
p3.8xlarge) and one T4 node (g4dn.12xlarge) — GPT-2 (24 layers, hidden 1024, sequence
1024), global batch 32, fp16 — with the iteration time each measured and the time AMP's
own cost model predicted for it (Li et al., NeurIPS 2022; the repository's cached trial
log). Nothing of meshplan was fitted to them: the cluster is the catalog's two instance
types as they are, and each trial is priced with `POST /v1/estimate`'s path
(`solver.estimate.estimate_plan`) as the plan AMP ran: its degrees, micro-batch and layer
split, no ZeRO, no recompute, the DeepSpeed pipeline engine, every pipeline stage on the
node group its ranks sit on.

A trial is priced when its stages each lie on one kind of GPU (stage j holds ranks
[j·dp·tp, (j+1)·dp·tp), DeepSpeed's pipe-data-model order, 4 ranks per node, the T4 node
last): those with pipeline ≥ 4. A stage whose data-parallel group spans both kinds (pipeline
1 or 2) is not a plan meshplan expresses (`stage_groups` puts a stage on one group); those
are counted, not priced.

Printed: the absolute error of meshplan's and of AMP's predictions on the same trials
(mean and median), Spearman's rank correlation of each with the measured times, and the
measured time of each one's predicted best trial.

Usage: `python bench/published_mixed.py`.
"""

from __future__ import annotations

import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scipy.stats import spearmanr  # noqa: E402

from cost_models.base import TrainingProblem  # noqa: E402
from cost_models.registry import build_cost_model  # noqa: E402
from hardware_catalog import resolve_cluster  # noqa: E402
from solver.estimate import estimate_plan  # noqa: E402
from specs import ClusterSpec, TrainingWorkload  # noqa: E402
from specs.model import ModelSpec  # noqa: E402
from specs.plan import TrainingPlan  # noqa: E402

DATA = Path(__file__).resolve().parent / "data" / "published_mixed_runs.json"
FIRST_LAYER_ENTRY = 2
"""AMP's layer list: embed, noop, then the transformer layers (entries 2 .. 2 + L - 1)."""


def dataset() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DATA.read_text())
    return data


def stage_layout(
    run: dict[str, Any], layers: int, gpus_per_node: int, nodes: list[str]
) -> tuple[list[str], list[int]] | str:
    """(group of every stage, transformer layers of every stage) of one trial, or why the
    trial is no plan of stages on one kind of GPU each."""
    stage = run["data"] * run["tensor"]
    if stage > gpus_per_node:
        return f"a stage of {stage} GPUs spans nodes of both kinds"
    groups = [nodes[j * stage // gpus_per_node] for j in range(run["pipeline"])]
    bounds = run["layer_partition_boundaries"]
    split = []
    for a, b in zip(bounds, bounds[1:], strict=False):
        lo, hi = max(a, FIRST_LAYER_ENTRY), min(b, FIRST_LAYER_ENTRY + layers)
        split.append(max(0, hi - lo))
    if min(split) < 1:
        return f"a stage holds no transformer layer ({split})"
    return groups, split


@dataclass(frozen=True)
class Priced:
    run: dict[str, Any]
    predicted_s: float
    feasible: bool

    @property
    def measured_s(self) -> float:
        return float(self.run["measured_iteration_s"])

    @property
    def amp_s(self) -> float:
        return float(self.run["amp_predicted_iteration_s"])


def price_all() -> tuple[list[Priced], list[tuple[dict[str, Any], str]]]:
    """Every trial priced, and those left out with the reason."""
    data = dataset()
    model = ModelSpec.model_validate(data["model"])
    cluster = resolve_cluster(ClusterSpec.model_validate(data["cluster"]))
    problem = TrainingProblem(
        model=model,
        cluster=cluster,
        workload=TrainingWorkload.model_validate(data["workload"]),
    )
    # node i of the job is a node of this group (the groups' nodes in order)
    nodes = [g.name or g.accelerator.id for g in cluster.groups for _ in range(g.num_nodes)]
    cost_model = build_cost_model("analytical")
    priced, skipped = [], []
    for run in data["runs"]:
        layout = stage_layout(run, model.num_layers, int(data["gpus_per_node"]), nodes)
        if isinstance(layout, str):
            skipped.append((run, layout))
            continue
        groups, split = layout
        plan = TrainingPlan.model_validate(
            {
                "parallelism": {
                    "data": run["data"],
                    "tensor": run["tensor"],
                    "pipeline": run["pipeline"],
                },
                "micro_batch_size": run["micro_batch_size"],
                "zero_stage": 0,
                "recompute": "none",
                "framework": "deepspeed",
                "stage_groups": groups,
                "stage_layers": split,
            }
        )
        est = estimate_plan(problem, cost_model, plan)
        priced.append(Priced(run, est.metrics.step_time_s, est.feasible))
    return priced, skipped


@dataclass(frozen=True)
class Summary:
    trials: int
    left_out: int
    ours_mean_ape: float
    ours_median_ape: float
    amp_mean_ape: float
    amp_median_ape: float
    ours_spearman: float
    amp_spearman: float
    ours_best_measured_s: float
    amp_best_measured_s: float
    measured_best_s: float


def summarise(priced: list[Priced], left_out: int) -> Summary:
    def ape(pred: float, real: float) -> float:
        return abs(pred / real - 1.0)

    ours = [ape(p.predicted_s, p.measured_s) for p in priced]
    amp = [ape(p.amp_s, p.measured_s) for p in priced]
    measured = [p.measured_s for p in priced]
    return Summary(
        trials=len(priced),
        left_out=left_out,
        ours_mean_ape=statistics.fmean(ours),
        ours_median_ape=statistics.median(ours),
        amp_mean_ape=statistics.fmean(amp),
        amp_median_ape=statistics.median(amp),
        ours_spearman=float(spearmanr([p.predicted_s for p in priced], measured).statistic),
        amp_spearman=float(spearmanr([p.amp_s for p in priced], measured).statistic),
        ours_best_measured_s=min(priced, key=lambda p: p.predicted_s).measured_s,
        amp_best_measured_s=min(priced, key=lambda p: p.amp_s).measured_s,
        measured_best_s=min(measured),
    )


def main() -> None:
    priced, skipped = price_all()
    print(f"{'tp':>2} {'dp':>2} {'pp':>2} {'mb':>2}  {'measured':>8} {'meshplan':>8} {'AMP':>6}")
    for p in sorted(priced, key=lambda p: p.measured_s):
        r = p.run
        flag = "" if p.feasible else "  (infeasible by our rules)"
        print(
            f"{r['tensor']:2d} {r['data']:2d} {r['pipeline']:2d} {r['micro_batch_size']:2d}  "
            f"{p.measured_s:8.2f} {p.predicted_s:8.2f} {p.amp_s:6.2f}{flag}"
        )
    s = summarise(priced, len(skipped))
    print(f"\n{s.trials} trials priced, {s.left_out} left out (a stage across both kinds of GPU)")
    print(
        f"|error| mean / median: meshplan {s.ours_mean_ape:.1%} / {s.ours_median_ape:.1%}, "
        f"AMP {s.amp_mean_ape:.1%} / {s.amp_median_ape:.1%}"
    )
    print(f"Spearman vs measured: meshplan {s.ours_spearman:.2f}, AMP {s.amp_spearman:.2f}")
    print(
        f"measured time of the predicted best: meshplan {s.ours_best_measured_s:.2f} s, AMP "
        f"{s.amp_best_measured_s:.2f} s (fastest measured {s.measured_best_s:.2f} s)"
    )


if __name__ == "__main__":
    main()
