"""Measured GEMM kernels at decode-sized M, by accelerator, weight format and software stack.

The serving cost model prices a linear layer on the roofline of `cost_models/analytical/
gemm.py` with constants measured on NVIDIA's TensorRT-LLM kernels (module docstring of
`analytical.py`). Other stacks' kernels can sit far from it at the M of decode batches: ROCm's
aiter FP8 kernels on MI300X take 3.5–6.6× the roofline time from M = 64 up when untuned, and
2.4–2.9× from M = 256 when tuned for the shape (ROCm/aiter PR #1092; `data/gemm_kernels.json`).

A table holds one weight shape (n × k) timed at several M. `MeasuredGemm` prices any shape as
the roofline × the table's measured / roofline ratio at the same M, interpolated linearly in
log2 M between the measured points and held at the end points outside them: the kernel's
loss at a given M is taken to carry over to other shapes of the same stack, while the
roofline carries the shape (weight bytes, FLOPs). `gemm_stack` in the serving cost model's
config picks a table (`roofline`: none); the default table of an accelerator and weight
format applies otherwise.
"""

from __future__ import annotations

import bisect
import json
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from cost_models.analytical.gemm import RooflineGemm

DATA = Path(__file__).resolve().parent / "data" / "gemm_kernels.json"
ROOFLINE_STACK = "roofline"
"""The `gemm_stack` that ignores every table."""


@dataclass(frozen=True)
class KernelTable:
    """Measured times (s) of one stack's GEMM at one weight shape, by M."""

    accelerator: str
    dtype: str
    stack: str
    default: bool
    n: int
    k: int
    points: tuple[tuple[int, float], ...]
    """(M, seconds), M increasing."""
    source: str


@lru_cache(maxsize=1)
def kernel_tables() -> tuple[KernelTable, ...]:
    """The shipped tables (`data/gemm_kernels.json`)."""
    rows = json.loads(DATA.read_text())["tables"]
    return tuple(
        KernelTable(
            accelerator=r["accelerator"],
            dtype=r["dtype"],
            stack=r["stack"],
            default=bool(r["default"]),
            n=int(r["n"]),
            k=int(r["k"]),
            points=tuple(sorted((int(m), float(us) * 1e-6) for m, us in r["points_us"])),
            source=r["source"],
        )
        for r in rows
    )


def stacks() -> list[str]:
    """Every stack name a table carries, and `roofline`."""
    return sorted({t.stack for t in kernel_tables()} | {ROOFLINE_STACK})


def table_for(accelerator: str, dtype: str, stack: str | None) -> KernelTable | None:
    """The table of `stack` (None: the default one) for the accelerator and weight format;
    None when there is none or `stack` is `roofline`."""
    if stack == ROOFLINE_STACK:
        return None
    for table in kernel_tables():
        if table.accelerator == accelerator and table.dtype == dtype:
            if (stack is None and table.default) or table.stack == stack:
                return table
    return None


class MeasuredGemm:
    """A roofline GEMM rescaled at each M by a measured kernel table (module docstring)."""

    def __init__(self, roofline: RooflineGemm, table: KernelTable) -> None:
        self.roofline = roofline
        self.table = table
        self._log_m = [math.log2(m) for m, _ in table.points]
        self._ratio = [t / roofline.time_s(m, table.k, table.n) for m, t in table.points]

    @property
    def launch_s(self) -> float:
        return self.roofline.launch_s

    def ratio(self, m: float) -> float:
        """Measured / roofline time of the table's stack at M."""
        x = math.log2(max(m, 1.0))
        xs, ys = self._log_m, self._ratio
        if x <= xs[0]:
            return ys[0]
        if x >= xs[-1]:
            return ys[-1]
        i = bisect.bisect_right(xs, x)
        w = (x - xs[i - 1]) / (xs[i] - xs[i - 1])
        return ys[i - 1] + w * (ys[i] - ys[i - 1])

    def time_s(self, m: float, k: float, n: float) -> float:
        base = self.roofline.time_s(m, k, n)
        return base * self.ratio(m) if base > 0 else base


__all__ = ["KernelTable", "MeasuredGemm", "kernel_tables", "stacks", "table_for"]
