"""Pipeline step time of a plan: the schedule plug-in (`cost_models.analytical.schedules`)
applied to the per-rank times. No fallback: an unknown schedule is a `SpecError` (422).

* 1F1B (PipeDream-Flush; Narayanan et al. 2021 §2.2.1): step = (m−1)·max_j T_j + Σ_j T_j,
  (m + p − 1)·T for uniform stages: the bubble is (p−1)/m of the ideal m·T.
* Interleaved 1F1B with v chunks per rank (§2.2.2): step = m·max_j T_j + (Σ_j T_j − max_j T_j)/v.
* The others: `schedules/` (one module per family, each citing its paper).

The bubble is step − m·max_j T_j.
"""

from __future__ import annotations

from collections.abc import Sequence

from cost_models.analytical.schedules import ScheduleTime, StageTimes, get

__all__ = ["ScheduleTime", "interleaved_one_f_one_b", "one_f_one_b", "pipeline_step"]


def one_f_one_b(work_s: Sequence[float], microbatches: int) -> ScheduleTime:
    """1F1B: (m−1)·max T + Σ T (Narayanan et al. 2021 §2.2.1)."""
    return get("1f1b").step(StageTimes.of(work_s, [0.0] * len(work_s)), microbatches, 1)


def interleaved_one_f_one_b(
    work_s: Sequence[float], microbatches: int, virtual: int
) -> ScheduleTime:
    """Interleaved 1F1B: m·max T + (Σ T − max T)/v (Narayanan et al. 2021 §2.2.2)."""
    return get("interleaved_1f1b").step(
        StageTimes.of(work_s, [0.0] * len(work_s)), microbatches, virtual
    )


def pipeline_step(
    work_s: Sequence[float] | StageTimes, microbatches: int, virtual: int, schedule: str
) -> ScheduleTime:
    """The step of `schedule` (by name). `work_s`: the per-rank F, B, W times, or the
    per-rank work T_j alone for schedules that do not split the backward.

    Raises:
        SpecError: at `pipeline_schedule` for an unknown schedule.
    """
    sched = get(schedule)
    times = work_s if isinstance(work_s, StageTimes) else StageTimes.of(work_s, [0.0] * len(work_s))
    return sched.step(times, microbatches, virtual)
