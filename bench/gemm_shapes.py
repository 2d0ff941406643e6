"""GEMM model against published GEMM microbenchmarks: the analytical model's time for each
shape of `bench/data/gemm_microbenchmarks.json` (kernel measurements by shape, sources per
row) against the measured TFLOP/s, and the mean absolute log error per accelerator and
dtype. This is where the GEMM model's shape parameters are checked (and FP8's k-overhead
ratio was fitted); whole-model runs never tune it.

Usage: `python bench/gemm_shapes.py`.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cost_models.analytical.gemm import RooflineGemm  # noqa: E402
from cost_models.analytical.training.config import (  # noqa: E402
    FP8_K_OVERHEAD_RATIO,
    AnalyticalConfig,
    gemm_k_overhead_for,
)
from hardware_catalog import get_accelerator  # noqa: E402

DATA = Path(__file__).resolve().parent / "data" / "gemm_microbenchmarks.json"


def rows() -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = json.loads(DATA.read_text())["rows"]
    return rows


def predicted_tflops(row: dict[str, Any], config: AnalyticalConfig | None = None) -> float:
    """The model's TFLOP/s for one row (the GEMM model the training cost model builds)."""
    cfg = config or AnalyticalConfig()
    acc = get_accelerator(row["accelerator"])
    fp8 = row["dtype"] == "fp8"
    k0 = gemm_k_overhead_for(cfg, acc) * (FP8_K_OVERHEAD_RATIO if fp8 else 1.0)
    gemm = RooflineGemm(
        acc.peak_flops(row["dtype"]),
        (acc.gemm_efficiency_fp8 or acc.gemm_efficiency) if fp8 else acc.gemm_efficiency,
        acc.memory_bandwidth_bytes_per_s,
        1.0 if fp8 else 2.0,
        cfg.kernel_launch_s,
        k0,
    )
    m, n, k = row["m"], row["n"], row["k"]
    return 2.0 * m * n * k / gemm.time_s(m, k, n) / 1e12


def summary() -> dict[str, float]:
    """Mean |ln(predicted / measured)| per accelerator and dtype, and overall."""
    groups: dict[str, list[float]] = {}
    for row in rows():
        err = abs(math.log(predicted_tflops(row) / row["tflops"]))
        groups.setdefault(f"{row['accelerator']} {row['dtype']}", []).append(err)
        groups.setdefault("all", []).append(err)
    return {k: statistics.fmean(v) for k, v in groups.items()}


def main() -> None:
    print(
        f"{'accelerator':11} {'dtype':5} {'m':>6} {'n':>6} {'k':>6} {'meas':>6} {'pred':>6} {'err':>6}"
    )
    for row in rows():
        pred = predicted_tflops(row)
        print(
            f"{row['accelerator']:11} {row['dtype']:5} {row['m']:6} {row['n']:6} {row['k']:6} "
            f"{row['tflops']:6.0f} {pred:6.0f} {pred / row['tflops'] - 1:+6.0%}"
        )
    print("\nmean |ln(predicted / measured)|:")
    for k, v in sorted(summary().items()):
        print(f"  {k:20} {v:6.1%}")


if __name__ == "__main__":
    main()
