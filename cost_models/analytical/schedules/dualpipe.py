"""DualPipe and DualPipeV (DeepSeek-AI, "DeepSeek-V3 Technical Report", arXiv 2412.19437,
§3.2.1 and Table 2; deepseek-ai/DualPipe README and `dualpipe.py` / `dualpipev.py`).

DualPipe feeds half the micro-batches from each end of the pipeline: rank j holds stage j of
one direction and stage p − 1 − j of the other, so 2 copies of the parameters of a stage
(Table 2: "2×"), and runs one forward chunk of one micro-batch overlapped with a backward
chunk of another (their all-to-all hidden behind the other's computation). Bubble
(p/2 − 1)·(F&B + B_full − 3W) with B_full = B + W the full backward and F&B the overlapped
pair; activation memory p + 1 micro-batches per rank. We price F&B as F + B + W: the hiding of
the expert all-to-all is already in the layer costs (`layer_costs.py`, the framework's
`ep_comm_overlap`), so the bubble term is F + 2B − W per stage. The reverse direction's
stage p − 1 − j is priced as rank j's own stage (exact for mirror-symmetric splits such as
the even split). Rules (`DualPipe.step`): p even, m even and m ≥ 2p.

DualPipeV ("cut-in-half" DualPipe, the DualPipe repository): one direction, 2 chunks per rank
in a V (rank j holds chunks j and 2p − 1 − j, no duplicated parameters); the same table
formula in chunk times with p_chunks = 2p: (p − 1)·(F + 2B − W)/2 with F, B, W a rank's
per micro-batch times; 2p + 1 chunk activations per rank (p + 1 on its first chunk, p on its
second). Rule (`DualPipeV.step`, torch's `ScheduleDualPipeV`): m ≥ 2p.
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
from cost_models.analytical.schedules.v_shape import V_RULES


def _dual_rows(pipeline: int, virtual: int, microbatches: int) -> tuple[tuple[int, ...], ...]:
    return capped([(pipeline + 1,) for _ in range(pipeline)], microbatches)


def _dualv_rows(pipeline: int, virtual: int, microbatches: int) -> tuple[tuple[int, ...], ...]:
    return capped([(pipeline + 1, pipeline) for _ in range(pipeline)], microbatches)


def _dual_rules(pipeline: int, virtual: int, microbatches: int) -> list[RuleBreak]:
    out = []
    if pipeline < 2 or pipeline % 2:
        out.append(
            RuleBreak("dualpipe.pipeline", f"dualpipe needs an even pipeline >= 2 (got {pipeline})")
        )
    elif microbatches % 2 or microbatches < 2 * pipeline:
        out.append(
            RuleBreak(
                "dualpipe.microbatches",
                f"dualpipe needs an even number of micro-batches, at least 2 × pipeline = "
                f"{2 * pipeline} (got {microbatches})",
            )
        )
    return out


def _dual_kappa(p: int, v: int) -> float:
    return (p / 2 - 1) / (p - 1) if p > 1 else 0.0


DUALPIPE = BubbleSchedule(
    name="dualpipe",
    title="DualPipe",
    source="DeepSeek-V3 Technical Report (arXiv 2412.19437) §3.2.1, Table 2",
    beta=(1.0, 2.0, -1.0),
    kappa=_dual_kappa,
    chunks=(1, 1),
    inflight_rows=_dual_rows,
    placement="dual",
    splits_backward=True,
    parameter_copies=2,
    extra_rules=_dual_rules,
)

DUALPIPE_V = BubbleSchedule(
    name="dualpipe_v",
    title="DualPipeV",
    source="deepseek-ai/DualPipe (DualPipeV); DeepSeek-V3 Technical Report Table 2",
    beta=(1.0, 2.0, -1.0),
    kappa=lambda p, v: 0.5,
    chunks=(2, 2),
    inflight_rows=_dualv_rows,
    placement="v",
    splits_backward=True,
    extra_rules=V_RULES("dualpipe_v", 2),
    frameworks={
        "torchtitan": FrameworkOption({"pipeline_parallel_schedule": "DualPipeV"}),
        "fsdp": FrameworkOption(
            {"schedule_class": "torch.distributed.pipelining.ScheduleDualPipeV"},
            note="the class torchtitan's DualPipeV builds; two stages per rank, V order",
        ),
    },
)
