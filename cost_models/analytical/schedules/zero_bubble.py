"""Zero-bubble schedules with one chunk per rank (Qi et al., "Zero Bubble Pipeline
Parallelism", ICLR 2024, §3 and Table 1): the backward is split into B (input gradient, on the
critical path) and W (weight gradient, scheduled into the bubbles).

* ZB-H1: bubble (p−1)·(F + B − W) with 1F1B's memory, p micro-batches on rank 0 (rank j
  holds p − j).
* ZB-H2: bubble (p−1)·(F + B − 2W) with 2p − 1 micro-batches in flight on rank 0 (rank j
  holds 2(p − j) − 1); zero when F + B ≤ 2W.

Uneven stages: the per-stage term is each non-critical rank's own (`base.py`). Run by the
authors' Megatron-LM fork (sail-sg/zero-bubble-pipeline-parallelism, ENABLE_ZERO_BUBBLE in its
examples; ZB-H1 also as the `zbpp_light` patch), not by upstream Megatron-LM, torchtitan
(whose `InterleavedZeroBubble` is a multi-chunk variant) or DeepSpeed: no registered framework
profile runs them, so plans with them break that framework rule and exports refuse them.
"""

# The rule, row and coefficient callables share one signature (pipeline, virtual, m):
# ruff: noqa: ARG001, ARG002, ARG005
from __future__ import annotations

from cost_models.analytical.memory import inflight_1f1b
from cost_models.analytical.schedules.base import BubbleSchedule, capped


def _h1_rows(pipeline: int, virtual: int, microbatches: int) -> tuple[tuple[int, ...], ...]:
    return inflight_1f1b(pipeline, microbatches)


def _h2_rows(pipeline: int, virtual: int, microbatches: int) -> tuple[tuple[int, ...], ...]:
    return capped([(2 * (pipeline - j) - 1,) for j in range(pipeline)], microbatches)


ZERO_BUBBLE_H1 = BubbleSchedule(
    name="zero_bubble_h1",
    title="ZB-H1",
    source="Qi et al., Zero Bubble Pipeline Parallelism, ICLR 2024, §3.1, Table 1",
    beta=(1.0, 1.0, -1.0),
    kappa=lambda p, v: 1.0,
    chunks=(1, 1),
    inflight_rows=_h1_rows,
    splits_backward=True,
)

ZERO_BUBBLE_H2 = BubbleSchedule(
    name="zero_bubble_h2",
    title="ZB-H2",
    source="Qi et al., Zero Bubble Pipeline Parallelism, ICLR 2024, §3.1, Table 1",
    beta=(1.0, 1.0, -2.0),
    kappa=lambda p, v: 1.0,
    chunks=(1, 1),
    inflight_rows=_h2_rows,
    splits_backward=True,
)
