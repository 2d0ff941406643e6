"""V-shape schedules: 2 chunks per rank, chunk c on rank c for c < p and on rank 2p − 1 − c
after (the first and the last chunk on rank 0), B and W split.

* ZB-V (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024, §6; "Pipeline Parallelism
  with Controllable Memory", NeurIPS 2024, V-ZB): ZB-H2's bubble term in per-chunk times,
  (p−1)·(F + B − 2W)/2 with F, B, W a rank's per micro-batch times (a chunk takes half), zero
  when F + B ≤ 2W, with 1F1B's activation memory: p micro-batches' worth of the rank's layers
  on every rank (2p chunk activations: 2(p−j)−1 on the rank's first chunk, 2j+1 on its
  second).
* V-Half (Controllable Memory, Table 1 of the authors' release: bubble rate ≈ p/(2m) against
  1F1B's p/m when F = B = W, activation memory (p+2)//2 micro-batches): bubble
  (p−1)·(F + B + W)/2, (p+2)//2 micro-batches on each chunk of every rank.

Both need m ≥ 2p, one micro-batch per virtual stage (torch.distributed.pipelining's rule for
its V schedules, n_microbatches ≥ num_stages; below it the closed forms' steady state never
forms).
"""

# The rule, row and coefficient callables share one signature (pipeline, virtual, m):
# ruff: noqa: ARG001, ARG002, ARG005
from __future__ import annotations

from cost_models.analytical.schedules.base import (
    BubbleSchedule,
    FrameworkOption,
    RuleBreak,
    capped,
)


def _zbv_rows(pipeline: int, virtual: int, microbatches: int) -> tuple[tuple[int, ...], ...]:
    return capped([(2 * (pipeline - j) - 1, 2 * j + 1) for j in range(pipeline)], microbatches)


def _half_rows(pipeline: int, virtual: int, microbatches: int) -> tuple[tuple[int, ...], ...]:
    half = (pipeline + 2) // 2
    return capped([(half, half) for _ in range(pipeline)], microbatches)


def _v_rules(name: str, min_factor: int):  # type: ignore[no-untyped-def]
    def rules(pipeline: int, virtual: int, microbatches: int) -> list[RuleBreak]:
        out = []
        if pipeline < 2:
            out.append(
                RuleBreak(f"{name}.pipeline", f"{name} needs pipeline >= 2 (got {pipeline})")
            )
        elif microbatches < min_factor * pipeline:
            need = "pipeline" if min_factor == 1 else f"{min_factor} × pipeline"
            out.append(
                RuleBreak(
                    f"{name}.microbatches",
                    f"{name} needs at least {need} = {min_factor * pipeline} micro-batches "
                    f"(got {microbatches})",
                )
            )
        return out

    return rules


ZERO_BUBBLE_V = BubbleSchedule(
    name="zero_bubble_v",
    title="ZB-V",
    source=(
        "Qi et al., Zero Bubble Pipeline Parallelism, ICLR 2024, §6; Qi et al., Pipeline "
        "Parallelism with Controllable Memory, NeurIPS 2024 (V-ZB)"
    ),
    beta=(1.0, 1.0, -2.0),
    kappa=lambda p, v: 0.5,
    chunks=(2, 2),
    inflight_rows=_zbv_rows,
    placement="v",
    splits_backward=True,
    extra_rules=_v_rules("zero_bubble_v", 2),
    frameworks={
        "torchtitan": FrameworkOption({"pipeline_parallel_schedule": "ZBVZeroBubble"}),
        "fsdp": FrameworkOption(
            {"schedule_class": "torch.distributed.pipelining.ScheduleZBVZeroBubble"},
            note="the class torchtitan's ZBVZeroBubble builds; two stages per rank, V order",
        ),
    },
)

V_HALF = BubbleSchedule(
    name="v_half",
    title="V-Half",
    source="Qi et al., Pipeline Parallelism with Controllable Memory, NeurIPS 2024 (V-Half)",
    beta=(1.0, 1.0, 1.0),
    kappa=lambda p, v: 0.5,
    chunks=(2, 2),
    inflight_rows=_half_rows,
    placement="v",
    splits_backward=True,
    extra_rules=_v_rules("v_half", 2),
)

V_RULES = _v_rules
