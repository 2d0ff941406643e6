"""GPipe, 1F1B and interleaved 1F1B: the schedules that run a micro-batch's whole backward
(B then W) as one operation.

* GPipe (Huang et al., "GPipe", NeurIPS 2019): every forward, then every backward. With the
  rank order fixed, the step is the longest path through the (rank, micro-batch) grid: the
  forwards of all ranks, the backwards back, and m − 1 more of the slowest forward and of the
  slowest backward: ΣT + (m−1)·(max F + max (B+W)) — exact for uneven stages (the simulation
  in `simulate.py` agrees); (m + p − 1)·T for identical stages. Holds all m micro-batches.
* 1F1B (PipeDream-Flush; Narayanan et al. 2021 §2.2.1): (m−1)·max T + ΣT; bubble
  (p−1)·(F+B+W) for identical stages (Qi et al. 2024 Table 1). Rank j holds min(p − j, m).
* Interleaved 1F1B with v chunks per rank (§2.2.2): m·max T + (ΣT − max T)/v; needs m a
  multiple of p (Megatron's micro-batch groups). Rank j's chunk counts: `memory.py`.
"""

# The rule, row and coefficient callables share one signature (pipeline, virtual, m):
# ruff: noqa: ARG001, ARG002, ARG005
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from cost_models.analytical.memory import inflight_1f1b, inflight_interleaved
from cost_models.analytical.schedules.base import (
    BubbleSchedule,
    FrameworkOption,
    Placement,
    RuleBreak,
    ScheduleTime,
    StageSums,
    StageTimes,
    capped,
)

MEGATRON = FrameworkOption(note="Megatron-LM's default pipeline schedule")


@dataclass(frozen=True, slots=True)
class GPipe:
    """All forwards, then all backwards (module docstring)."""

    name: str = "gpipe"
    title: str = "GPipe"
    source: str = "Huang et al., GPipe, NeurIPS 2019"
    placement: Placement = "loop"
    splits_backward: bool = False
    parameter_copies: int = 1
    frameworks: Mapping[str, FrameworkOption] = field(
        default_factory=lambda: {
            "torchtitan": FrameworkOption({"pipeline_parallel_schedule": "GPipe"}),
            "fsdp": FrameworkOption(
                {"schedule_class": "torch.distributed.pipelining.ScheduleGPipe"},
                note="the class torchtitan's GPipe builds; one stage per rank",
            ),
        }
    )

    def chunks_ok(self, virtual: int) -> bool:
        return virtual == 1

    def rules(self, pipeline: int, virtual: int, microbatches: int) -> list[RuleBreak]:
        if virtual != 1:
            return [
                RuleBreak(
                    "gpipe.chunks-per-rank",
                    f"gpipe runs exactly 1 model chunk per pipeline rank "
                    f"(parallelism.virtual_pipeline = {virtual})",
                )
            ]
        return []

    def step(self, times: StageTimes, microbatches: int, virtual: int) -> ScheduleTime:
        work = times.work_s
        back = [b + w for b, w in zip(times.input_grad_s, times.weight_grad_s, strict=True)]
        step = sum(work) + (microbatches - 1) * (max(times.forward_s) + max(back))
        steady = microbatches * max(work)
        return ScheduleTime(step, steady, step - steady)

    def inflight(
        self, pipeline: int, virtual: int, microbatches: int
    ) -> tuple[tuple[int, ...], ...]:
        return tuple((microbatches,) for _ in range(pipeline))

    def lower_bound_s(
        self, microbatches: int, pipeline: int, virtual: int, work_max_s: float, sums: StageSums
    ) -> float:
        """max F + max(B+W) ≥ F_c + B_c + W_c = max T: step ≥ (m−1)·L + ΣT."""
        return (microbatches - 1) * work_max_s + sums.total_s


def _one_chunk(pipeline: int, virtual: int, microbatches: int) -> tuple[tuple[int, ...], ...]:
    return inflight_1f1b(pipeline, microbatches)


def _interleaved_rows(
    pipeline: int, virtual: int, microbatches: int
) -> tuple[tuple[int, ...], ...]:
    return capped(inflight_interleaved(pipeline, virtual, microbatches), microbatches)


def _interleaved_rules(pipeline: int, virtual: int, microbatches: int) -> list[RuleBreak]:
    if pipeline < 2:
        return [
            RuleBreak(
                "interleaved_1f1b.pipeline",
                f"interleaved_1f1b needs pipeline >= 2 (got {pipeline})",
            )
        ]
    if microbatches < pipeline or microbatches % pipeline:
        return [
            RuleBreak(
                "interleaved_1f1b.microbatches",
                f"interleaved_1f1b needs the number of micro-batches ({microbatches}) to be "
                f"a multiple of pipeline ({pipeline}) and at least pipeline",
            )
        ]
    return []


ONE_F_ONE_B = BubbleSchedule(
    name="1f1b",
    title="1F1B (PipeDream-Flush)",
    source="Narayanan et al. 2021 §2.2.1; Qi et al. 2024 Table 1",
    beta=(1.0, 1.0, 1.0),
    kappa=lambda p, v: 1.0,
    chunks=(1, 1),
    inflight_rows=_one_chunk,
    frameworks={
        "megatron_core": MEGATRON,
        "megatron_lm": MEGATRON,
        "torchtitan": FrameworkOption({"pipeline_parallel_schedule": "1F1B"}),
        "deepspeed": FrameworkOption(note="PipelineEngine's TrainSchedule"),
        "fsdp": FrameworkOption(note="a plain training loop's pipeline"),
    },
)

INTERLEAVED_1F1B = BubbleSchedule(
    name="interleaved_1f1b",
    title="Interleaved 1F1B",
    source="Narayanan et al. 2021 §2.2.2",
    beta=(1.0, 1.0, 1.0),
    kappa=lambda p, v: 1.0 / v,
    chunks=(2, None),
    inflight_rows=_interleaved_rows,
    extra_rules=_interleaved_rules,
    frameworks={
        "megatron_core": FrameworkOption(note="--num-virtual-stages-per-pipeline-rank"),
        "megatron_lm": FrameworkOption(note="--num-layers-per-virtual-pipeline-stage"),
        "torchtitan": FrameworkOption({"pipeline_parallel_schedule": "Interleaved1F1B"}),
        "fsdp": FrameworkOption(note="a plain training loop's pipeline"),
    },
)
