"""Outside check on published end-to-end training throughputs that are not calibration rows.

`bench/data/published_records.json` holds runs that no parameter of the cost model is fitted
to (the calibration set is `bench/data/calibration/`; the straggler spread, the only whole-run
fit, is fitted there). Two kinds of row:

- `best_plan`: the source reports its best throughput for a model on given hardware (its
  layout partly or not stated); it is compared with the search's top plan for the same
  model, hardware and batch. A ratio well above 1 would mean the top plan's MFU is not
  believable; a ratio below 1, that the search or the model misses what the authors found.
- `layout`: the source gives the parallel degrees; they are pinned, the rest (micro-batch,
  virtual stages, recompute, ZeRO) is left to the search, and the predicted TFLOP/s per GPU
  is compared with the measured one.

Usage: `python bench/records.py`.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cost_models.base import TrainingProblem  # noqa: E402
from cost_models.registry import build_cost_model  # noqa: E402
from hardware_catalog import resolve_cluster  # noqa: E402
from solver import search  # noqa: E402
from specs import ClusterSpec, SearchConstraints, TrainingWorkload  # noqa: E402
from specs.model_input import resolve_model  # noqa: E402

DATA = Path(__file__).resolve().parent / "data" / "published_records.json"


def rows() -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = json.loads(DATA.read_text())["rows"]
    return rows


@dataclass(frozen=True)
class RecordResult:
    row: dict[str, Any]
    predicted_tflops: float
    layout: str

    @property
    def ratio(self) -> float:
        """Predicted / measured model TFLOP/s per GPU."""
        return self.predicted_tflops / float(self.row["tflops_per_gpu"])


def evaluate(row: dict[str, Any]) -> RecordResult:
    """The search's top plan for one row (pinned degrees for `layout` rows)."""
    cluster = {
        "node_groups": [
            {
                "accelerator": row["accelerator"],
                "num_nodes": row["nodes"],
                "gpus_per_node": row["gpus_per_node"],
            }
        ]
    }
    problem = TrainingProblem(
        model=resolve_model(row["model"]),
        cluster=resolve_cluster(ClusterSpec.model_validate(cluster)),
        workload=TrainingWorkload(
            global_batch_size=row["global_batch_size"], sequence_length=row["sequence_length"]
        ),
    )
    constraints = SearchConstraints(fixed=row.get("fixed", {}))
    result = search(problem, build_cost_model("analytical"), constraints, top_k=1)
    if not result.plans:
        raise SystemExit(f"{row['id']}: no feasible plan ({dict(result.stats.pruned)})")
    est = result.plans[0].estimate
    p = est.plan.parallelism
    layout = (
        f"dp{p.data} tp{p.tensor} pp{p.pipeline} vp{p.virtual_pipeline} cp{p.context} "
        f"mbs{est.plan.micro_batch_size} z{est.plan.zero_stage} {est.plan.recompute}"
    )
    return RecordResult(row, est.metrics.model_tflops_per_gpu, layout)


def main() -> None:
    results = [evaluate(row) for row in rows()]
    print(
        f"{'record':28} {'kind':9} {'measured':>8} {'predicted':>9} {'ratio':>6}  top plan"
        " (TFLOP/s per GPU, model FLOPs)"
    )
    for r in results:
        print(
            f"{r.row['id']:28} {r.row['kind']:9} {r.row['tflops_per_gpu']:8.0f} "
            f"{r.predicted_tflops:9.0f} {r.ratio:6.2f}  {r.layout}"
        )
    print()
    for kind in ("best_plan", "layout"):
        errs = [abs(r.ratio - 1) for r in results if r.row["kind"] == kind]
        logs = [math.log(r.ratio) for r in results if r.row["kind"] == kind]
        if errs:
            print(
                f"{kind:9}: {len(errs)} rows, mean |error| {statistics.mean(errs):.1%}, "
                f"max {max(errs):.1%}, mean signed log ratio {statistics.mean(logs):+.1%}"
            )


if __name__ == "__main__":
    main()
