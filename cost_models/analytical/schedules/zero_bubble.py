"""Zero-bubble schedules with one chunk per rank (Qi et al., "Zero Bubble Pipeline
Parallelism", ICLR 2024, §3 and Table 1): the backward is split into B (input gradient, on the
critical path) and W (weight gradient, scheduled into the bubbles).

* ZB-H1: bubble (p−1)·(F + B − W) with 1F1B's memory, p micro-batches on rank 0 (rank j
  holds p − j).
* ZB-H2: bubble (p−1)·(F + B − 2W) with 2p − 1 micro-batches in flight on rank 0 (rank j
  holds 2(p − j) − 1); zero when F + B ≤ 2W.

Uneven stages: the per-stage term is each non-critical rank's own (`base.py`).

Who runs them:

* ZB-H1: PyTorch's `torch.distributed.pipelining.ScheduleInterleavedZeroBubble` given one
  `PipelineStage` per rank (torch 2.13 `schedules.py`: "implementing the ZB1P schedule"; with
  one local stage its order is 1F1B's warm-up of p − 1 − j forwards on rank j, then F and B
  with rank j's first j weight-gradient passes deferred to the drain), which is ZB-H1: replayed
  with F, B, W times it takes exactly m·(F+B+W) + (p−1)·max(F, F+B−W)
  (tests/cost_models/test_torch_pipelining_schedules.py). That is the `fsdp` profile (a plain
  training loop with PyTorch's composable parallelisms). torchtitan builds the same class
  only with at least 2 stages per rank (`torchtitan/distributed/pipeline_parallel.py`:
  "Multi-stage schedule requires at least 2 stages per rank"), a multi-chunk schedule this
  planner does not price, so torchtitan does not run ZB-H1 here and its export refuses it.
  The authors' Megatron-LM fork (sail-sg/zero-bubble-pipeline-parallelism) runs its searched
  ZB-1p (`--enable-zero-bubble --zero-bubble-max-pending-backward p`), which has ZB-H1's bubble
  in every setting of the paper's Table 5, but no framework profile models that fork.
* ZB-H2: no framework runs the handcrafted schedule. The fork's `--zero-bubble-max-pending-
  backward 2p` runs ZB-2p, a searched schedule with a 2p·M_B limit whose bubble is below
  ZB-H2's (Table 5), so it is not mapped here; plans with ZB-H2 break every framework's
  schedule rule and the exports refuse them.
"""

# The rule, row and coefficient callables share one signature (pipeline, virtual, m):
# ruff: noqa: ARG001, ARG002, ARG005
from __future__ import annotations

from cost_models.analytical.memory import inflight_1f1b
from cost_models.analytical.schedules.base import BubbleSchedule, FrameworkOption, capped


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
    frameworks={
        "fsdp": FrameworkOption(
            {"schedule_class": "torch.distributed.pipelining.ScheduleInterleavedZeroBubble"},
            note="one PipelineStage per rank (stages=[stage]); torch 2.13",
        )
    },
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
